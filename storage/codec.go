package storage

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/devhook/devhook"
)

// Records are stored in a small binary format rather than JSON: a list page
// decodes thousands of summaries, a verdict filter may scan every one of
// them, and bodies must stay raw bytes (JSON would base64 them). Every record
// starts with a format byte so that a later version can change the layout.
//
// Scalars are varints; strings and byte slices are a uvarint length followed
// by the bytes; a time is a varint of Unix seconds and a uvarint of
// nanoseconds, or a single 0 byte for the zero time; a header is a count of
// names, then for each name its values in order (repeated headers keep every
// value). An attempt may end with optional fields (attemptMade and those
// after it), each a tag and a value, which a reader that does not know them
// skips: a field added there needs no new format byte.
const (
	formatMeta    = 1 // deliveries bucket: a delivery without body and attempts
	formatSummary = 1 // summaries bucket
	formatAttempt = 1 // attempts bucket
)

var errCorrupt = errors.New("corrupt record")

type encoder struct{ b []byte }

func (e *encoder) byte(c byte)         { e.b = append(e.b, c) }
func (e *encoder) uint(v uint64)       { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)         { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)        { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(p []byte)      { e.uint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) bool(v bool)         { e.byte(b2u(v)) }
func (e *encoder) dur(d time.Duration) { e.int(int64(d)) }

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func (e *encoder) time(t time.Time) {
	if t.IsZero() {
		e.byte(0)
		return
	}
	e.byte(1)
	e.int(t.Unix())
	e.uint(uint64(t.Nanosecond()))
}

func (e *encoder) header(h http.Header) {
	e.uint(uint64(len(h)))
	if len(h) == 0 {
		return
	}
	// Sorted names make the encoding deterministic; the order of values
	// within a name is what HTTP cares about, and is kept.
	var small [16]string // a request's headers, without allocating
	names := small[:0]
	if len(h) > len(small) {
		names = make([]string, 0, len(h))
	}
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		e.str(k)
		vs := h[k]
		e.uint(uint64(len(vs)))
		for _, v := range vs {
			e.str(v)
		}
	}
}

// decoder reads what encoder wrote. After the first error every read
// returns a zero value and err stays set, so callers check once at the end.
// Strings and byte slices are copied: nothing returned aliases the buffer,
// which is bbolt's memory map.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() { d.err = errCorrupt; d.b = nil }

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// raw returns the next length-prefixed bytes without copying them.
func (d *decoder) raw() []byte {
	n := d.uint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) str() string { return string(d.raw()) }

func (d *decoder) bytes() []byte {
	p := d.raw()
	if d.err != nil {
		return nil
	}
	return append([]byte{}, p...)
}

func (d *decoder) bool() bool { return d.byte() != 0 }

func (d *decoder) dur() time.Duration { return time.Duration(d.int()) }

func (d *decoder) time() time.Time {
	if d.byte() == 0 {
		return time.Time{}
	}
	sec := d.int()
	nsec := d.uint()
	if d.err != nil || nsec >= 1e9 {
		d.fail()
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec))
}

func (d *decoder) header() http.Header {
	n := d.uint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(d.b)) { // every name takes at least one byte
		d.fail()
		return nil
	}
	h := make(http.Header, n)
	for range n {
		k := d.str()
		m := d.uint()
		if d.err != nil || m > uint64(len(d.b)) {
			d.fail()
			return nil
		}
		vs := make([]string, 0, m)
		for range m {
			vs = append(vs, d.str())
		}
		h[k] = vs
	}
	if d.err != nil {
		return nil
	}
	return h
}

func (d *decoder) format(want byte) {
	if d.byte() != want && d.err == nil {
		d.err = errors.New("unknown record format (written by a newer devhook?)")
		d.b = nil
	}
}

// appendMeta encodes d without its attempts, and with its body only when
// withBody is set: the deliveries bucket keeps bodies apart, the queue keeps
// them inline.
func appendMeta(b []byte, d *devhook.Delivery, withBody bool) []byte {
	e := encoder{b}
	e.byte(formatMeta)
	e.str(d.ID)
	e.str(d.Channel)
	e.time(d.ReceivedAt)
	e.str(d.Method)
	e.str(d.Path)
	e.str(d.RawQuery)
	e.header(d.Header)
	e.str(d.RemoteAddr)
	e.bool(d.Queued)
	v := d.Verdict
	e.str(v.Result)
	e.str(v.Reason)
	e.int(int64(v.Status))
	e.str(v.Text)
	e.int(v.T)
	ev := d.Event
	e.str(ev.Type)
	e.str(ev.RunID)
	e.str(ev.Status)
	e.str(ev.StatusV2)
	e.bool(withBody)
	if withBody {
		e.bytes(d.Body)
	}
	return e.b
}

func decodeMeta(b []byte) (*devhook.Delivery, error) {
	dec := decoder{b: b}
	dec.format(formatMeta)
	d := &devhook.Delivery{
		ID:         dec.str(),
		Channel:    dec.str(),
		ReceivedAt: dec.time(),
		Method:     dec.str(),
		Path:       dec.str(),
		RawQuery:   dec.str(),
		Header:     dec.header(),
		RemoteAddr: dec.str(),
		Queued:     dec.bool(),
	}
	d.Verdict = devhook.Verdict{
		Result: dec.str(),
		Reason: dec.str(),
		Status: int(dec.int()),
		Text:   dec.str(),
		T:      dec.int(),
	}
	d.Event = devhook.Event{Type: dec.str(), RunID: dec.str(), Status: dec.str(), StatusV2: dec.str()}
	if dec.bool() {
		d.Body = dec.bytes()
	}
	if dec.err != nil {
		return nil, dec.err
	}
	return d, nil
}

// The fields List filters on come first in a summary, so that a filter can
// reject a row without decoding (and allocating) the rest.
func appendSummary(b []byte, s *devhook.Summary) []byte {
	e := encoder{b}
	e.byte(formatSummary)
	e.str(s.Verdict)
	e.int(int64(s.Status))
	e.str(s.Event.RunID)
	e.str(s.Event.StatusV2)
	e.str(s.ID)
	e.time(s.ReceivedAt)
	e.str(s.Method)
	e.str(s.Path)
	e.str(s.RawQuery)
	e.str(s.Event.Type)
	e.str(s.Event.Status)
	e.int(int64(s.BodySize))
	e.bool(s.Queued)
	e.int(int64(s.Attempts))
	e.dur(time.Duration(s.Duration))
	e.str(s.Error)
	return e.b
}

// matchSummary reports whether the encoded summary b passes the filter's
// summary fields (Verdict, Status, RunID, StatusV2), without allocating.
func matchSummary(b []byte, f *devhook.Filter) (bool, error) {
	dec := decoder{b: b}
	dec.format(formatSummary)
	verdict := dec.raw()
	status := dec.int()
	runID := dec.raw()
	statusV2 := dec.raw()
	if dec.err != nil {
		return false, dec.err
	}
	switch {
	case f.Verdict != "" && string(verdict) != f.Verdict,
		f.Status > 0 && status != int64(f.Status),
		f.Status < 0 && status != 0,
		f.RunID != "" && string(runID) != f.RunID,
		f.StatusV2 != "" && string(statusV2) != f.StatusV2:
		return false, nil
	}
	return true, nil
}

func decodeSummary(b []byte) (devhook.Summary, error) {
	dec := decoder{b: b}
	dec.format(formatSummary)
	var s devhook.Summary
	s.Verdict = dec.str()
	s.Status = int(dec.int())
	s.Event.RunID = dec.str()
	s.Event.StatusV2 = dec.str()
	s.ID = dec.str()
	s.ReceivedAt = dec.time()
	s.Method = dec.str()
	s.Path = dec.str()
	s.RawQuery = dec.str()
	s.Event.Type = dec.str()
	s.Event.Status = dec.str()
	s.BodySize = int(dec.int())
	s.Queued = dec.bool()
	s.Attempts = int(dec.int())
	s.Duration = devhook.Duration(dec.dur())
	s.Error = dec.str()
	return s, dec.err
}

// outcome is what a summary shows of its delivery's last attempt.
type outcome struct {
	seq      int
	status   int
	duration devhook.Duration
	err      string
}

func outcomeOf(a *devhook.Attempt) outcome {
	return outcome{seq: a.Seq, status: a.Status, duration: a.Duration, err: a.Error}
}

// summaryFields locates, in an encoded summary, the fields that an attempt
// changes: Status, second, and Attempts, Duration and Error, the last
// three.
type summaryFields struct {
	statusAt, statusEnd int
	attemptsAt          int
	attempts            int
}

// scanSummary checks the encoded summary b as decodeSummary does, without
// allocating, and returns where its attempt fields are.
func scanSummary(b []byte) (summaryFields, error) {
	var f summaryFields
	dec := decoder{b: b}
	dec.format(formatSummary)
	dec.raw() // Verdict
	f.statusAt = len(b) - len(dec.b)
	dec.int()
	f.statusEnd = len(b) - len(dec.b)
	dec.raw() // RunID
	dec.raw() // StatusV2
	dec.raw() // ID
	dec.time()
	for range 5 { // Method, Path, RawQuery, Event.Type, Event.Status
		dec.raw()
	}
	dec.int()  // BodySize
	dec.bool() // Queued
	f.attemptsAt = len(b) - len(dec.b)
	f.attempts = int(dec.int())
	dec.dur()
	dec.raw() // Error
	return f, dec.err
}

// appendWithAttempt appends to dst the encoded summary b with o as its
// last attempt, and reports true; unless b has that attempt or a later
// one: then it appends nothing and reports false. The bytes are those of
// decodeSummary, withAttempt and appendSummary, without decoding.
func appendWithAttempt(dst, b []byte, o *outcome) ([]byte, bool, error) {
	f, err := scanSummary(b)
	if err != nil {
		return dst, false, err
	}
	if o.seq <= f.attempts {
		return dst, false, nil
	}
	e := encoder{append(dst, b[:f.statusAt]...)}
	e.int(int64(o.status))
	e.b = append(e.b, b[f.statusEnd:f.attemptsAt]...)
	e.int(int64(o.seq))
	e.dur(time.Duration(o.duration))
	e.str(o.err)
	return e.b, true, nil
}

func appendAttempt(b []byte, a *devhook.Attempt) []byte {
	e := encoder{b}
	e.byte(formatAttempt)
	e.int(int64(a.Seq))
	return appendAttemptTail(e.b, a)
}

// appendAttemptTail encodes what follows an attempt's Seq: the journal
// encodes it before it takes its lock, where the Seq is numbered.
func appendAttemptTail(b []byte, a *devhook.Attempt) []byte {
	e := encoder{b}
	e.str(a.Kind)
	e.str(a.Target)
	e.time(a.StartedAt)
	e.dur(time.Duration(a.Duration))
	e.bool(a.Request != nil)
	if r := a.Request; r != nil {
		e.str(r.Method)
		e.str(r.Path)
		e.str(r.RawQuery)
		e.header(r.Header)
		e.bytes(r.Body)
		e.bool(r.Resigned)
	}
	e.int(int64(a.Status))
	e.header(a.Header)
	e.bytes(a.Body)
	e.str(a.Error)
	if a.Made != "" {
		e.uint(attemptMade)
		e.str(a.Made)
	}
	return e.b
}

// Optional fields of an attempt, after its Error: each a uvarint tag and a
// length-prefixed value, in any order. A decoder skips a tag it does not
// know, and a record without them (written before they were added) ends
// at its Error. A devhook from before them reads a record up to its Error
// and ignores the rest.
const (
	attemptMade = 1 // Attempt.Made
)

// made returns the Attempt.Made name v, without allocating for the
// names devhook writes.
func made(v []byte) string {
	switch string(v) {
	case devhook.MadeAsArrived:
		return devhook.MadeAsArrived
	case devhook.MadeResigned:
		return devhook.MadeResigned
	case devhook.MadeEdited:
		return devhook.MadeEdited
	}
	return string(v)
}

func decodeAttempt(b []byte) (devhook.Attempt, error) {
	dec := decoder{b: b}
	dec.format(formatAttempt)
	var a devhook.Attempt
	a.Seq = int(dec.int())
	a.Kind = dec.str()
	a.Target = dec.str()
	a.StartedAt = dec.time()
	a.Duration = devhook.Duration(dec.dur())
	if dec.bool() {
		a.Request = &devhook.Request{
			Method:   dec.str(),
			Path:     dec.str(),
			RawQuery: dec.str(),
			Header:   dec.header(),
			Body:     dec.bytes(),
			Resigned: dec.bool(),
		}
	}
	a.Status = int(dec.int())
	a.Header = dec.header()
	a.Body = dec.bytes()
	if len(a.Body) == 0 {
		a.Body = nil // omitempty in JSON: no answer body reads as absent
	}
	a.Error = dec.str()
	for dec.err == nil && len(dec.b) > 0 {
		tag := dec.uint()
		v := dec.raw()
		if tag == attemptMade {
			a.Made = made(v)
		}
	}
	return a, dec.err
}

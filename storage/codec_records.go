package storage

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/devhook/devhook"
)

// appendMetaFields encodes d without its attempts, and with its body only
// when withBody is set: layout 1 of a delivery's record.
func appendMetaFields(e *encoder, d *devhook.Delivery, withBody bool) {
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
}

// appendMeta encodes d for the deliveries bucket: without its body, which
// the bodies bucket keeps, and its attempts; with bodyCRC, the checksum of
// its body.
func appendMeta(b []byte, d *devhook.Delivery, bodyCRC uint32) []byte {
	start := len(b)
	e := encoder{b}
	e.byte(checkedFormat | formatMeta)
	appendMetaFields(&e, d, false)
	e.b = binary.BigEndian.AppendUint32(e.b, bodyCRC)
	return seal(e.b, start, kindMeta)
}

// appendQueued encodes d with its body inline, as the single relay's
// queue keeps it: layout 1, without a checksum (see AppendDelivery).
func appendQueued(b []byte, d *devhook.Delivery) []byte {
	e := encoder{b}
	e.byte(uncheckedFormat)
	appendMetaFields(&e, d, true)
	return e.b
}

// bodySum is a delivery record's checksum of its body, if it has one.
type bodySum struct {
	crc uint32
	ok  bool
}

// matches reports whether body is the body the record was written with,
// as far as the record tells.
func (s bodySum) matches(body []byte) bool {
	return !s.ok || crc32.Checksum(body, crcTable()) == s.crc
}

// decodeMeta decodes the delivery record b stored at key (nil: not
// stored under a key, a queue entry's), and its checksum of the body.
func decodeMeta(key, b []byte) (*devhook.Delivery, bodySum, error) {
	p, checked, err := openValue(b, kindMeta, formatMeta)
	if err != nil {
		return nil, bodySum{}, err
	}
	dec := decoder{b: p}
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
	var sum bodySum
	if checked {
		sum = bodySum{crc: dec.fixed32(), ok: true}
	}
	dec.end()
	switch {
	case dec.err != nil:
		return nil, bodySum{}, whyDecode
	case key != nil && d.ID != string(key):
		return nil, bodySum{}, whyKey
	}
	return d, sum, nil
}

// The fields List filters on come first in a summary, so that a filter can
// reject a row without decoding (and allocating) the rest. The functions
// below but appendSummary take a summary's payload, which summaryPayload
// returns once it checked the value.
func appendSummary(b []byte, s *devhook.Summary) []byte {
	start := len(b)
	e := encoder{b}
	e.byte(checkedFormat | formatSummary)
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
	return seal(e.b, start, kindSummary)
}

// summaryPayload checks the summary b of delivery key (nil: not checked
// against a key) and returns its payload and where its fields are.
//
// A summary of layout 1 without a checksum that an attempt changed may
// end with that attempt's key (id 0x00 seq), and, when the attempt was
// longer than half a page, 4 bytes more (its checksum in the checks
// bucket): devhook's journal wrote it so before checksums, and older
// decoders ignored it. Those bytes, and only those, are allowed after its
// last field.
func summaryPayload(key, b []byte) ([]byte, summaryFields, error) {
	p, checked, err := openValue(b, kindSummary, formatSummary)
	if err != nil {
		return nil, summaryFields{}, err
	}
	f, err := scanSummary(p)
	if err != nil {
		return nil, summaryFields{}, whyDecode
	}
	if f.end != len(p) && (checked || !trailingAttemptKey(p[f.end:], p[f.idAt:f.idEnd], f.attempts)) {
		return nil, summaryFields{}, whyDecode
	}
	if key != nil && !bytes.Equal(p[f.idAt:f.idEnd], key) {
		return nil, summaryFields{}, whyKey
	}
	return p[:f.end:f.end], f, nil
}

// checkSummary is summaryPayload for the reads that need no field's
// place (a list): a checked summary's checksum vouches for its fields, of
// which only the id is read. An unchecked one is scanned whole.
func checkSummary(key, b []byte) ([]byte, error) {
	p, checked, err := openValue(b, kindSummary, formatSummary)
	if err != nil {
		return nil, err
	}
	if !checked {
		p, _, err = summaryPayload(key, b)
		return p, err
	}
	dec := decoder{b: p}
	dec.raw() // Verdict
	dec.int() // Status
	dec.raw() // RunID
	dec.raw() // StatusV2
	id := dec.raw()
	switch {
	case dec.err != nil:
		return nil, whyDecode
	case key != nil && !bytes.Equal(id, key):
		return nil, whyKey
	}
	return p, nil
}

// trailingAttemptKey reports whether rest is the key of attempt seq of
// delivery id, with 4 bytes after it or not.
func trailingAttemptKey(rest, id []byte, seq int) bool {
	return (len(rest) == len(id)+5 || len(rest) == len(id)+5+crcLen) && bytes.Equal(rest[:len(id)], id) &&
		rest[len(id)] == 0 && int64(binary.BigEndian.Uint32(rest[len(id)+1:])) == int64(seq)
}

// matchSummary reports whether the summary payload p passes the filter's
// summary fields (Verdict, Status, RunID, StatusV2), without allocating.
func matchSummary(p []byte, f *devhook.Filter) (bool, error) {
	dec := decoder{b: p}
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

func decodeSummary(p []byte) (devhook.Summary, error) {
	dec := decoder{b: p}
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
	dec.end()
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

// summaryFields locates, in a summary's payload, its id and the fields
// that an attempt changes: Status, second, and Attempts, Duration and
// Error, the last three.
type summaryFields struct {
	statusAt, statusEnd int
	idAt, idEnd         int
	attemptsAt          int
	attempts            int
	end                 int // after the last field
}

// scanSummary checks the fields of the summary payload p as decodeSummary
// does, without allocating, and returns where they are; what follows the
// last is summaryPayload's to judge.
func scanSummary(p []byte) (summaryFields, error) {
	var f summaryFields
	dec := decoder{b: p}
	dec.raw() // Verdict
	f.statusAt = len(p) - len(dec.b)
	dec.int()
	f.statusEnd = len(p) - len(dec.b)
	dec.raw() // RunID
	dec.raw() // StatusV2
	id := dec.raw()
	f.idEnd = len(p) - len(dec.b)
	f.idAt = f.idEnd - len(id)
	dec.time()
	for range 5 { // Method, Path, RawQuery, Event.Type, Event.Status
		dec.raw()
	}
	dec.int()  // BodySize
	dec.bool() // Queued
	f.attemptsAt = len(p) - len(dec.b)
	f.attempts = int(dec.int())
	dec.dur()
	dec.raw() // Error
	f.end = len(p) - len(dec.b)
	return f, dec.err
}

// appendWithAttempt appends to dst the summary b, of delivery key, with o
// as its last attempt, and reports true; unless b has that attempt or a
// later one: then it appends nothing and reports false. The bytes are
// those of decodeSummary, withAttempt and appendSummary, without
// decoding: a summary written before checksums gets one.
func appendWithAttempt(dst, key, b []byte, o *outcome) ([]byte, bool, error) {
	p, f, err := summaryPayload(key, b)
	if err != nil {
		return dst, false, err
	}
	if o.seq <= f.attempts {
		return dst, false, nil
	}
	start := len(dst)
	e := encoder{append(dst, checkedFormat|formatSummary)}
	e.b = append(e.b, p[:f.statusAt]...)
	e.int(int64(o.status))
	e.b = append(e.b, p[f.statusEnd:f.attemptsAt]...)
	e.int(int64(o.seq))
	e.dur(time.Duration(o.duration))
	e.str(o.err)
	return seal(e.b, start, kindSummary), true, nil
}

func appendAttempt(b []byte, a *devhook.Attempt) []byte {
	start := len(b)
	e := encoder{b}
	e.byte(checkedFormat | formatAttempt)
	e.int(int64(a.Seq))
	return seal(appendAttemptTail(e.b, a), start, kindAttempt)
}

// appendAttemptTail encodes what follows an attempt's Seq: the journal
// encodes it before it takes its lock, where the Seq is numbered, and
// seals the value there.
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
	if r := a.Route; r != nil {
		var v encoder
		v.int(int64(r.Index))
		v.str(r.Text)
		v.str(r.Target)
		e.uint(attemptRoute)
		e.bytes(v.b)
	}
	return e.b
}

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

// decodeRoute decodes an attemptRoute value, or returns nil for one that
// does not decode: the route is a label, not worth the attempt.
func decodeRoute(v []byte) *devhook.Route {
	dec := decoder{b: v}
	r := &devhook.Route{Index: int(dec.int()), Text: dec.str(), Target: dec.str()}
	if dec.err != nil {
		return nil
	}
	return r
}

// decodeAttempt decodes the attempt b stored at key, the attempt's key
// (nil: not stored under a key, a journal record's).
func decodeAttempt(key, b []byte) (devhook.Attempt, error) {
	p, checked, err := openValue(b, kindAttempt, formatAttempt)
	if err != nil {
		return devhook.Attempt{}, err
	}
	dec := decoder{b: p}
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
	if checked {
		for dec.err == nil && len(dec.b) > 0 {
			tag := dec.uint()
			v := dec.raw()
			switch tag {
			case attemptMade:
				a.Made = made(v)
			case attemptRoute:
				a.Route = decodeRoute(v)
			}
		}
	}
	dec.end()
	switch {
	case dec.err != nil:
		return devhook.Attempt{}, whyDecode
	case key != nil && (len(key) < 4 || int64(binary.BigEndian.Uint32(key[len(key)-4:])) != int64(a.Seq)):
		return devhook.Attempt{}, whyKey
	}
	return a, nil
}

// Optional fields of an attempt, after its Error: each a uvarint tag and a
// length-prefixed value, in any order. A decoder skips a tag it does not
// know, and a record without them (written before they were added) ends
// at its Error. A devhook from before them reads a record up to its Error
// and ignores the rest.
const (
	attemptMade = 1 // Attempt.Made
	// attemptRoute is Attempt.Route: its Index (varint), Text and Target
	// (strings), in that order; a reader skips what follows them.
	attemptRoute = 2
)

package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"slices"
	"time"

	"github.com/devhook/devhook"
)

// Records are stored in a small binary format rather than JSON: a list page
// decodes thousands of summaries, a verdict filter may scan every one of
// them, and bodies must stay raw bytes (JSON would base64 them).
//
// Scalars are varints; strings and byte slices are a uvarint length followed
// by the bytes; a time is a varint of Unix seconds and a uvarint of
// nanoseconds, or a single 0 byte for the zero time; a header is a count of
// names, then for each name its values in order (repeated headers keep every
// value). An attempt may end with optional fields (attemptMade and those
// after it), each a tag and a value, which a reader that does not know them
// skips: a field added there needs no new format byte. Only checked values
// carry them: a value written before checksums is read strictly.
//
// The envelope of a value (deliveries, summaries and attempts buckets).
// Its first byte is its format byte:
//
//   - 0x80|v, bit 7 set: a checked value, of layout v, whose last 4 bytes
//     are the CRC-32C (Castagnoli, big endian) of its kind's letter ('D' a
//     delivery's record, 'S' a summary, 'A' an attempt) followed by every
//     byte before them, the format byte included: a value of one kind never
//     passes for another's. devhook writes every value so since record
//     checksums came in. A checked value whose checksum does not match is
//     damaged, whatever its first byte says. One whose checksum matches and
//     whose layout is above this devhook's is a newer devhook's
//     (ErrNewerRecord): that, and nothing else, is "written by a newer
//     devhook". A later layout keeps this envelope: only the bytes between
//     the format byte and the checksum change.
//   - 1, bit 7 clear: a value of layout 1 written before checksums, without
//     one. It is read, strictly: every byte accounted for (but the bytes
//     that journal left after a summary's fields: see summaryPayload), its
//     id (a summary's, a delivery's) or Seq (an attempt's) equal to its
//     key's.
//   - anything else (0, 0x80, a layout above 1 without bit 7): damage. No
//     devhook wrote it.
//
// So an old value is told apart from a damaged one by bit 7, then by
// decoding: a checked value whose damage clears bit 7 and leaves a 1 would
// have to decode strictly as layout 1, its 4 checksum bytes included, and
// name its own key, which damage does not do (TestDamagedLeaves_Fuzz). An
// old value's own damage is found only when it breaks that structure
// (docs/RELIABILITY.md, Known limits).
//
// A delivery's record (deliveries bucket) ends, before its checksum, with
// the CRC-32C of its body (bodies bucket, raw bytes): a body is checked
// against its delivery's record. Bodies of old records longer than half a
// page have theirs in the checks bucket (checksum.go). The single relay's
// queue entries (AppendDelivery, boltrelay) stay layout 1 without a
// checksum, the body inline.
const (
	formatMeta    = 1 // deliveries bucket: a delivery without body and attempts
	formatSummary = 1 // summaries bucket
	formatAttempt = 1 // attempts bucket

	// checkedFormat is the bit of the format byte of a value that ends
	// with its checksum.
	checkedFormat = 0x80
	// uncheckedFormat is the format byte of the values written before
	// checksums: layout 1, the only one written without.
	uncheckedFormat = 1
	crcLen          = 4
)

var errCorrupt = errors.New("corrupt record")

// ErrNewerRecord is wrapped by the error of a read that met a record a
// newer devhook wrote: its checksum holds, its format is above this
// devhook's.
var ErrNewerRecord = errors.New("a record written by a newer devhook")

// errRecordDamaged is a value that fails its checks: why.
type errRecordDamaged string

func (e errRecordDamaged) Error() string { return "is damaged (" + string(e) + ")" }
func (e errRecordDamaged) Unwrap() error { return ErrDamaged }

const (
	whyChecksum = errRecordDamaged("its checksum does not match")
	whyDecode   = errRecordDamaged("it does not decode")
	whyFormat   = errRecordDamaged("its format byte is no devhook's")
	whyKey      = errRecordDamaged("its key does not match it")
	whyMissing  = errRecordDamaged("it is missing while its delivery's list row counts it: its key or its page is damaged")
)

// errNewerRecord is a checked value of a layout above this devhook's.
type errNewerRecord struct{ format, known byte }

func (e errNewerRecord) Error() string {
	return fmt.Sprintf("was written by a newer devhook (record format %d; this one reads format %d): upgrade devhook to read it", e.format, e.known)
}
func (e errNewerRecord) Unwrap() error { return ErrNewerRecord }

// valueKind is the checksum of a kind's letter, where the checksum of a
// value of that kind starts.
type valueKind uint32

const (
	kindMeta    valueKind = 0xd49cd9f2 // CRC-32C of "D"
	kindSummary valueKind = 0x10087a76 // "S"
	kindAttempt valueKind = 0xe16dcdee // "A"
)

// seal appends the checksum of b[start:], the value of kind k that begins
// at start.
func seal(b []byte, start int, k valueKind) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Update(uint32(k), crcTable(), b[start:]))
}

// openValue checks the envelope of the stored value b, of kind k and
// layout want, and returns what lies between its format byte and its
// checksum, and whether it had one.
func openValue(b []byte, k valueKind, want byte) (payload []byte, checked bool, err error) {
	if len(b) == 0 {
		return nil, false, whyDecode
	}
	f := b[0]
	if f&checkedFormat == 0 {
		if f != uncheckedFormat {
			return nil, false, whyFormat
		}
		return b[1:], false, nil
	}
	if len(b) < 1+crcLen {
		return nil, true, whyDecode
	}
	n := len(b) - crcLen
	if crc32.Update(uint32(k), crcTable(), b[:n]) != binary.BigEndian.Uint32(b[n:]) {
		return nil, true, whyChecksum
	}
	switch v := f &^ checkedFormat; {
	case v == want:
		return b[1:n], true, nil
	case v > want:
		return nil, true, errNewerRecord{format: v, known: want}
	}
	return nil, true, whyFormat
}

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

// fixed32 reads 4 bytes, big endian.
func (d *decoder) fixed32() uint32 {
	if d.err != nil || len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

// end fails unless every byte was read: a value holds nothing after its
// last field.
func (d *decoder) end() {
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
}

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

package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"slices"
	"time"
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

package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"

	"github.com/devhook/devhook"
)

// The journal's format. A journal file starts with a header: the magic
// "devhookJ", a uint32 format version and a CRC-32C of those 12 bytes.
// Then records, each: the uint32 marker recMarker, the uint32 length of
// the body, a CRC-32C of the body, a CRC-32C of the 12 header bytes before
// it, then the body: uint64 sequence number, a kind byte, and the fields
// as codec.go writes them. Integers are big endian.
//
// The kinds and their fields:
//
//	recPut      id, meta, summary, run id, body
//	recAttempt  id, attempt
//
// Format 2, which this devhook writes, reuses a file in place: a file is
// mapped and written over again from its start once bbolt has every
// record it holds (journal_file.go). Its header goes on for 16 bytes more:
// the uint64 sequence number its records start at this time round, the
// uint32 high-water mark (the offset past the furthest byte any round
// wrote: it is raised before a record that goes further is copied), and a
// CRC-32C of those 12 bytes; records follow from byte 32. Reading stops at
// the first record that is not intact, or whose sequence number is not
// the one after its predecessor's (the first one's: not below the
// header's), unless an intact record with a greater sequence number comes
// further on: then what lies between is damage (journal_recovery.go).
// What a file holds after its last record, up to the high-water mark, is
// the torn start of a record that was never acknowledged, then records of
// earlier rounds, all numbered below the header's and never replayed, and
// the tails of earlier rounds' records whose starts a later round wrote
// over. A record there whose header is intact and whose body is not is
// damage (a record's header is written before its body, and a later round
// that overwrote a header overwrote what came before it, never after).
// After the high-water mark there is nothing but zeros (the file grows by
// ftruncate); anything else there is damage, but for the start of a record
// cut short by the end of the file, a torn write.
//
// Format 1, written by devhook before format 2, has the 16-byte header
// alone and records from byte 16 to the end of the file; it is read as it
// always was. <file>.rejected, where the records bbolt refused are kept
// (journal_apply.go), is written in format 1: it only grows.
//
// A header whose version is above journalVersion is a newer devhook's
// (errNewerJournal).

const (
	recPut     = 1 // id, meta, summary, run id, body
	recAttempt = 2 // id, attempt

	journalMagic   = "devhookJ"
	journalVersion = 2
	fileHeaderLen  = 16 // format 1's header; format 2's starts the same
	// fileHeaderLen2 is format 2's header: startAt is where its start
	// sequence number and the CRC-32C of it are.
	fileHeaderLen2 = 32
	startAt        = 16
	recMarker      = 0xd7e4a11c
	recHeaderLen   = 16
	// recMaxLen bounds a record's body; a longer length is damage.
	recMaxLen = 1 << 30
)

// crcTable is the CRC-32C table: crc32 makes it once and hands the same
// one back (the one its hardware path recognises).
func crcTable() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// appendFileHeader appends a format 1 header: the rejected file's.
func appendFileHeader(b []byte) []byte { return appendVersionHeader(b, 1) }

func appendVersionHeader(b []byte, version uint32) []byte {
	b = append(b, journalMagic...)
	b = binary.BigEndian.AppendUint32(b, version)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[len(b)-12:], crcTable()))
}

// appendFileHeader2 appends a format 2 header whose records start at seq
// start, nothing written after it yet.
func appendFileHeader2(b []byte, start uint64) []byte {
	b = appendVersionHeader(b, journalVersion)
	return appendStart(b, start, fileHeaderLen2)
}

// appendStart appends the part of a format 2 header that changes: the
// start sequence number, the high-water mark and their CRC-32C.
func appendStart(b []byte, start uint64, hwm int64) []byte {
	b = binary.BigEndian.AppendUint64(b, start)
	b = binary.BigEndian.AppendUint32(b, uint32(hwm))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[len(b)-12:], crcTable()))
}

// readStart returns the start sequence number and the high-water mark of
// a format 2 header, and whether their checksum holds.
func readStart(h []byte) (start uint64, hwm int, ok bool) {
	if len(h) < fileHeaderLen2 {
		return 0, 0, false
	}
	s := h[startAt:]
	return binary.BigEndian.Uint64(s), int(binary.BigEndian.Uint32(s[8:])), crc32.Checksum(s[:12], crcTable()) == binary.BigEndian.Uint32(s[12:])
}

// frame fills in the header of record b, whose first recHeaderLen bytes
// are reserved for it.
func frame(b []byte) {
	binary.BigEndian.PutUint32(b[0:], recMarker)
	binary.BigEndian.PutUint32(b[4:], uint32(len(b)-recHeaderLen))
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[recHeaderLen:], crcTable()))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crcTable()))
}

// frameState is what frameAt finds at an offset of a journal file.
type frameState int

const (
	frameOK      frameState = iota
	frameTorn               // the file ends inside the record
	frameBadHead            // no marker, or a header whose checksum fails
	frameBadBody            // an intact header, and a body whose checksum fails
)

// frameAt checks the record at the start of b and returns its length,
// header included (for frameOK and frameBadBody).
func frameAt(b []byte) (int, frameState) {
	if len(b) < recHeaderLen {
		var m [4]byte
		binary.BigEndian.PutUint32(m[:], recMarker)
		if bytes.HasPrefix(m[:], b[:min(len(b), 4)]) {
			return 0, frameTorn
		}
		return 0, frameBadHead
	}
	if binary.BigEndian.Uint32(b) != recMarker || crc32.Checksum(b[:12], crcTable()) != binary.BigEndian.Uint32(b[12:]) {
		return 0, frameBadHead
	}
	n := binary.BigEndian.Uint32(b[4:])
	if n > recMaxLen {
		return 0, frameBadHead
	}
	if int(n) > len(b)-recHeaderLen {
		return 0, frameTorn
	}
	size := recHeaderLen + int(n)
	if crc32.Checksum(b[recHeaderLen:size], crcTable()) != binary.BigEndian.Uint32(b[8:]) {
		return size, frameBadBody
	}
	return size, frameOK
}

// errNewerJournal is a journal written by a newer devhook.
type errNewerJournal uint32

func (e errNewerJournal) Error() string {
	return fmt.Sprintf("journal format %d, this devhook reads %d", uint32(e), journalVersion)
}

// scratch holds the buffers records are encoded in before they are copied,
// at their exact size, into their own. The zero value is ready; each
// journal has its own.
type scratch struct{ pool sync.Pool }

func (s *scratch) get() *[]byte {
	if p, ok := s.pool.Get().(*[]byte); ok {
		return p
	}
	return new([]byte)
}

func (s *scratch) put(p *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*p = b[:0]
		s.pool.Put(p)
	}
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// putRecord returns the journal record of d, unnumbered: its seq is
// written when it is queued. The record holds its own copy of d's
// fields, which the caller may change once PutDelivery returns.
func (j *journal) putRecord(d *devhook.Delivery) jrec {
	sp := j.scratch.get()
	b := appendMeta((*sp)[:0], d, crc32.Checksum(d.Body, crcTable()))
	metaLen := len(b)
	c := *d
	c.Attempts = nil
	s := c.Summarize()
	b = appendSummary(b, &s)
	meta, summary := b[:metaLen], b[metaLen:]
	// The run id comes from a body anyone may post: one that cannot be a
	// key (bbolt refuses keys over 32 KiB) must not make the delivery
	// impossible to record. It is still in the summary, just not indexed.
	runID := d.Event.RunID
	if len(runID) > maxRunIDLen || strings.IndexByte(runID, 0) >= 0 {
		runID = ""
	}
	size := recHeaderLen + 9
	for _, n := range []int{len(d.ID), len(meta), len(summary), len(runID), len(d.Body)} {
		size += uvarintLen(n) + n
	}
	enc := encoder{make([]byte, recHeaderLen+8, size)}
	enc.byte(recPut)
	enc.str(d.ID)
	idEnd := len(enc.b)
	enc.bytes(meta)
	metaEnd := len(enc.b)
	enc.bytes(summary)
	summaryEnd := len(enc.b)
	enc.str(runID)
	enc.bytes(d.Body)
	metaN, summaryN := len(meta), len(summary)
	j.scratch.put(sp, b)
	raw := enc.b
	slice := func(end, n int) []byte { return raw[end-n : end : end] }
	return jrec{kind: recPut, raw: raw, key: d.ID, put: encodedDelivery{
		id:      slice(idEnd, len(d.ID)),
		meta:    slice(metaEnd, metaN),
		summary: slice(summaryEnd, summaryN),
		body:    slice(len(raw), len(d.Body)),
		runID:   runID,
	}}
}

func decodePut(b []byte) (encodedDelivery, error) {
	dec := decoder{b: b}
	e := encodedDelivery{id: dec.raw(), meta: dec.raw(), summary: dec.raw()}
	e.runID = dec.str()
	e.body = dec.raw()
	if dec.err != nil {
		return encodedDelivery{}, dec.err
	}
	if e.body == nil {
		e.body = []byte{}
	}
	return e, nil
}

// decodeRecord decodes the record raw, whose header has been checked.
func decodeRecord(raw []byte) (jrec, error) {
	b := raw[recHeaderLen:]
	if len(b) < 9 {
		return jrec{}, errCorrupt
	}
	r := jrec{seq: binary.BigEndian.Uint64(b), kind: b[8], raw: raw}
	b = b[9:]
	switch r.kind {
	case recPut:
		e, err := decodePut(b)
		if err != nil {
			return jrec{}, err
		}
		r.put, r.key = e, string(e.id)
	case recAttempt:
		dec := decoder{b: b}
		r.id = dec.raw()
		r.enc = dec.raw()
		if dec.err != nil || len(dec.b) != 0 {
			return jrec{}, errCorrupt
		}
		a, err := decodeAttempt(nil, r.enc)
		if err != nil {
			return jrec{}, err
		}
		r.att, r.key = outcomeOf(&a), string(r.id)
	default:
		return jrec{}, errCorrupt
	}
	return r, nil
}

package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// maxRunIDLen bounds the run ids the run index keeps.
const maxRunIDLen = 1024

// List limits.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

func validID(what, id string) error {
	switch {
	case id == "":
		return devhook.Errorf(devhook.EINVALID, "%s id is empty", what)
	case len(id) > maxIDLen:
		return devhook.Errorf(devhook.EINVALID, "%s id is longer than %d bytes", what, maxIDLen)
	case strings.IndexByte(id, 0) >= 0:
		return devhook.Errorf(devhook.EINVALID, "%s id contains a NUL byte", what)
	}
	return nil
}

func notFound(id string) error {
	return devhook.Errorf(devhook.ENOTFOUND, "delivery %.200q not found", id)
}

func attemptPrefix(id []byte) []byte {
	return append(append(make([]byte, 0, len(id)+5), id...), 0)
}

func attemptKey(id []byte, seq int) []byte {
	return binary.BigEndian.AppendUint32(attemptPrefix(id), uint32(seq))
}

func runKey(runID string, id []byte) []byte {
	k := make([]byte, 0, len(runID)+1+len(id))
	return append(append(append(k, runID...), 0), id...)
}

func hasPrefix(k, prefix []byte) bool { return bytes.HasPrefix(k, prefix) }

// appendFill is the fill percent of buckets keyed by delivery id. Ids grow
// with time, so new keys land at the end: bbolt's default of one half
// would leave those pages half empty.
const appendFill = 0.95

// encodedDelivery is a delivery ready to be written (see putRecord).
type encodedDelivery struct {
	id, meta, summary, body []byte
	runID                   string
}

// PutDelivery records d, without its attempts. A delivery whose id is
// already recorded is left as it is and created is false: that is a
// redelivery.
func (db *DB) PutDelivery(d *devhook.Delivery) (created bool, err error) {
	if d == nil {
		return false, devhook.Errorf(devhook.EINVALID, "storage: put delivery: no delivery")
	}
	if err := validID("delivery", d.ID); err != nil {
		return false, err
	}
	if db.readOnly {
		return false, fmt.Errorf("storage: put delivery %s: %w", d.ID, errReadOnly)
	}
	created, err = db.journalPut(d)
	if err != nil {
		return false, fmt.Errorf("storage: put delivery %s: %w", d.ID, err)
	}
	return created, nil
}

// AddAttempt records a as the next attempt of delivery id, and returns it
// with its Seq set.
func (db *DB) AddAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	if validID("delivery", id) != nil {
		return devhook.Attempt{}, notFound(id) // it cannot have been recorded
	}
	if db.readOnly {
		return devhook.Attempt{}, fmt.Errorf("storage: add attempt to delivery %s: %w", id, errReadOnly)
	}
	a, err := db.journalAttempt(id, a)
	if err != nil {
		if devhook.ErrorCode(err) == devhook.ENOTFOUND {
			return devhook.Attempt{}, err
		}
		return devhook.Attempt{}, fmt.Errorf("storage: add attempt to delivery %s: %w", id, err)
	}
	return a, nil
}

// Delivery returns the delivery id with its body and its attempts in Seq
// order. A delivery whose record cannot be read fails, naming what is
// damaged and what to do. One whose body or some attempts cannot be read
// comes back with the rest and a *devhook.PartialError that says what
// it lacks, each such part marked in it (Delivery.BodyError,
// Attempt.ReadError), not in Damage: it can be shown, and sent
// again only when its body was read (devhook.SendError).
func (db *DB) Delivery(id string) (*devhook.Delivery, error) {
	if validID("delivery", id) != nil {
		// Ids come from URLs: one that could not have been recorded is
		// simply not there.
		return nil, notFound(id)
	}
	var d *devhook.Delivery
	var partial *devhook.PartialError
	err := db.view(func(v *view) error {
		var err error
		d, partial, err = v.delivery(id, func(err error) error { return db.explainPart(id, err) })
		return err
	})
	if err != nil {
		if devhook.ErrorCode(err) == devhook.ENOTFOUND {
			return nil, err
		}
		if dv := (errValueDamaged{}); errors.As(err, &dv) {
			return nil, db.damagedValue(err)
		}
		if re := (*recordError)(nil); errors.As(err, &re) {
			db.damage.note(re)
			return nil, db.recordReadError(re)
		}
		return nil, fmt.Errorf("storage: read delivery %s: %w", id, err)
	}
	if partial != nil {
		return d, partial
	}
	return d, nil
}

// isPartError reports whether err says why a part of a delivery (its
// body, an attempt) cannot be used: its record fails its checks, its value
// its checksum, or its body file lacks it.
func isPartError(err error) bool {
	var re *recordError
	var dv errValueDamaged
	return errors.As(err, &re) || errors.As(err, &dv)
}

// explainPart is the error of a read for err, a part of delivery id (its
// body, an attempt) that it could not use, naming the file and what to do.
// It is not noted in Damage, which is what lists skip, with the advice for
// a damaged record of the file (move the file away): the delivery is
// listed, and its part is its own problem.
func (db *DB) explainPart(id string, err error) error {
	if dv := (errValueDamaged{}); errors.As(err, &dv) {
		return db.damagedPart(id, err)
	}
	re := (*recordError)(nil)
	if !errors.As(err, &re) {
		return err
	}
	var inFile bodyFileDamage
	if errors.Is(re, ErrNewerRecord) || errors.As(re, &inFile) {
		return db.recordReadError(re)
	}
	return db.damagedPart(id, re)
}

// damagedPart is the error of Delivery for err, a part of delivery id
// (its body's value, an attempt) damaged in the store's file: that
// delivery's problem, not the file's, whose pages passed their checks at
// open. Deleting the delivery removes it; moving the whole file away, as
// for a damaged record of the file, would take every other delivery with
// it. The file is the evidence: the delete frees the damaged bytes' place
// for new records.
func (db *DB) damagedPart(id string, err error) error {
	return fmt.Errorf("storage: %s: %w; the rest of delivery %s and the other deliveries read as before. To drop this delivery: devhook deliveries delete %s (copy %s away first, with devhook stopped, to keep it as evidence: the delete frees the damaged bytes' place in it for new records)",
		db.path, err, id, id, db.path)
}

// List returns the deliveries that pass f, newest first. It reads only
// summaries, and bodies when f.Text is set. A summary that fails its
// checks, or that a newer devhook wrote, is skipped, and counted in
// Damage. A delivery whose body a search cannot read (its body file
// missing or damaged, its value failing its checksum) is listed, as it
// may hold the text, with Summary.BodyError saying why and what to do:
// its list row is whole, and its body is its delivery's problem, not a
// damaged record of the file.
func (db *DB) List(f devhook.Filter) ([]devhook.Summary, error) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = DefaultListLimit
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
	var text []byte
	if f.Text != "" {
		text = bytes.ToLower([]byte(f.Text))
	}
	out := make([]devhook.Summary, 0, min(limit, 64))
	err := db.view(func(v *view) error {
		summaries := v.tx.Bucket([]byte(bucketSummaries))
		next := newestFirst(v.tx, &f)
		// Pending deliveries that bbolt lacks, merged in by id.
		extra := v.newPuts(f.RunID, f.Before)
		bid, bv := next()
		for bid != nil || len(extra) > 0 {
			var id, sv []byte
			if n := len(extra); n > 0 && (bid == nil || bytes.Compare(extra[n-1].id, bid) > 0) {
				id, sv = extra[n-1].id, extra[n-1].summary
				extra = extra[:n-1]
			} else {
				id, sv = bid, bv
				bid, bv = next()
				if sv == nil {
					if sv = summaries.Get(id); sv == nil {
						continue // run index ahead of a pruned delivery: cannot happen, skip
					}
				}
			}
			p, err := v.summary(id, sv)
			if err != nil {
				if db.noteRecord(err) {
					continue
				}
				return err
			}
			ok, err := matchSummary(p, &f)
			if err != nil {
				return err // checked by summary: cannot happen
			}
			if !ok {
				continue
			}
			var unsearched string
			if text != nil {
				body, err := v.searchBody(id)
				switch {
				case isPartError(err):
					// Its record is whole and it may hold the text: listed,
					// saying why its body was not searched.
					unsearched = db.explainPart(string(id), err).Error()
				case err != nil:
					return err
				case !containsFold(body, text):
					continue
				}
			}
			s, err := decodeSummary(p)
			if err != nil {
				return err // checked by summary: cannot happen
			}
			s.BodyError = unsearched
			out = append(out, s)
			if len(out) == limit {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: list deliveries: %w", err)
	}
	return out, nil
}

// newestFirst returns an iterator over the ids (and, when it has them, the
// encoded summaries) of deliveries older than f.Before, newest first: from
// the run index when f.RunID is set, from the summaries otherwise.
func newestFirst(tx *bolt.Tx, f *devhook.Filter) func() (id, summary []byte) {
	if f.RunID != "" {
		prefix := runKey(f.RunID, nil)
		c := tx.Bucket([]byte(bucketRuns)).Cursor()
		var k []byte
		if f.Before != "" {
			k, _ = c.Seek(runKey(f.RunID, []byte(f.Before)))
		} else {
			k, _ = c.Seek(append(prefix[:len(prefix)-1:len(prefix)-1], 1))
		}
		first := true
		return func() ([]byte, []byte) {
			if first {
				first = false
				if k == nil {
					k, _ = c.Last()
				} else {
					k, _ = c.Prev()
				}
			} else {
				k, _ = c.Prev()
			}
			if k == nil || !hasPrefix(k, prefix) {
				return nil, nil
			}
			return k[len(prefix):], nil
		}
	}
	c := tx.Bucket([]byte(bucketSummaries)).Cursor()
	var k, v []byte
	first := true
	return func() ([]byte, []byte) {
		switch {
		case !first:
			k, v = c.Prev()
		case f.Before == "":
			first = false
			k, v = c.Last()
		default:
			first = false
			if k, _ = c.Seek([]byte(f.Before)); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
		return k, v
	}
}

// containsFold reports whether body contains lowered, which is already in
// lower case, ignoring case. ASCII needles are matched without allocating.
func containsFold(body, lowered []byte) bool {
	for _, c := range lowered {
		if c >= utf8.RuneSelf {
			return bytes.Contains(bytes.ToLower(body), lowered)
		}
	}
	n := len(lowered)
	first := lowered[0]
	for i := 0; i+n <= len(body); i++ {
		if lowerASCII(body[i]) != first {
			continue
		}
		j := 1
		for j < n && lowerASCII(body[i+j]) == lowered[j] {
			j++
		}
		if j == n {
			return true
		}
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// RunDeliveries returns the deliveries of a run, oldest first. It skips
// and counts what List does.
func (db *DB) RunDeliveries(runID string) ([]devhook.Summary, error) {
	if runID == "" || strings.IndexByte(runID, 0) >= 0 {
		return nil, devhook.Errorf(devhook.EINVALID, "run id is empty or contains a NUL byte")
	}
	var out []devhook.Summary
	err := db.view(func(v *view) error {
		add := func(id, sv []byte) error {
			p, err := v.summary(id, sv)
			if err != nil {
				if db.noteRecord(err) {
					return nil
				}
				return err
			}
			if p == nil {
				return nil
			}
			s, err := decodeSummary(p)
			if err != nil {
				return err // checked by summary: cannot happen
			}
			if s.Event.RunID != runID {
				// The run index names it (its key damaged, or the
				// summary's bytes): it belongs to another run.
				db.damage.note(newRecordError(bucketRuns, runKey(runID, id), nil, "the run's index entry", whyKey))
				return nil
			}
			out = append(out, s)
			return nil
		}
		summaries := v.tx.Bucket([]byte(bucketSummaries))
		prefix := runKey(runID, nil)
		c := v.tx.Bucket([]byte(bucketRuns)).Cursor()
		for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Next() {
			id := k[len(prefix):]
			if sv := summaries.Get(id); sv != nil {
				if err := add(id, sv); err != nil {
					return err
				}
			}
		}
		extra := v.newPuts(runID, "")
		for _, e := range extra {
			if err := add(e.id, e.summary); err != nil {
				return err
			}
		}
		if len(extra) > 0 {
			slices.SortFunc(out, func(a, b devhook.Summary) int { return strings.Compare(a.ID, b.ID) })
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: list deliveries of run %s: %w", runID, err)
	}
	return out, nil
}

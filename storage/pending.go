package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Reads never write: a read is a bbolt read transaction plus the records
// the journal holds that bbolt may not have yet. The two are taken
// together under the journal's lock, and a flush removes records from
// pending only after bbolt committed them, so every record is in one or
// the other, sometimes in both (committed, not yet removed). Deliveries are
// taken from bbolt when it has them; a pending attempt whose key bbolt has
// is skipped. So a read sees every write that returned before it, and a
// full disk, which stops the flush, does not stop reads.

// view is one read of the store.
type view struct {
	tx                           *bolt.Tx
	deliveries, bodies, attempts *bolt.Bucket
	bodyRefs                     *bolt.Bucket // nil in a store of schema 1, opened read-only
	files                        *bodyFiles

	puts map[string]*encodedDelivery // pending deliveries
	atts map[string][]*jrec          // pending attempts, by delivery id, in journal order
}

// view runs fn on a consistent read of bbolt and the pending records.
func (db *DB) view(fn func(v *view) error) error {
	return db.safely(func() error { return db.viewUnsafe(fn) })
}

func (db *DB) viewUnsafe(fn func(v *view) error) error {
	db.bodyReads.RLock()
	defer func() {
		db.bodyReads.RUnlock()
		if db.tidyOwed.Load() {
			db.tidyBodyFiles() // owed by a delete or retention during the read
		}
	}()
	j := db.journal
	j.mu.Lock()
	pending := j.pending
	tx, err := db.bolt.Begin(false)
	j.mu.Unlock()
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	v := &view{tx: tx, deliveries: tx.Bucket([]byte(bucketDeliveries)), bodies: tx.Bucket([]byte(bucketBodies)),
		attempts: tx.Bucket([]byte(bucketAttempts)), bodyRefs: tx.Bucket([]byte(bucketBodyRefs)), files: db.bodies}
	if len(pending) > 0 {
		v.puts = map[string]*encodedDelivery{}
		v.atts = map[string][]*jrec{}
		for i := range pending {
			r := &pending[i]
			switch r.kind {
			case recPut:
				v.puts[r.key] = &r.put
			case recAttempt:
				v.atts[r.key] = append(v.atts[r.key], r)
			}
		}
	}
	return fn(v)
}

// newPuts returns the pending deliveries that bbolt does not have, that
// belong to run runID unless it is "", and whose ids sort before before
// unless it is "", in id order.
func (v *view) newPuts(runID, before string) []*encodedDelivery {
	if len(v.puts) == 0 {
		return nil
	}
	var out []*encodedDelivery
	for _, e := range v.puts {
		if runID != "" && e.runID != runID || before != "" && string(e.id) >= before || v.deliveries.Get(e.id) != nil {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *encodedDelivery) int { return bytes.Compare(a.id, b.id) })
	return out
}

// summary returns the payload of the summary of delivery id, given what
// bbolt holds for it (nil: nothing), with its pending attempts applied;
// nil if the delivery is in neither. A summary that fails its checks is a
// *recordError.
func (v *view) summary(id, stored []byte) ([]byte, error) {
	sv, err := v.summaryValue(id, stored)
	if err != nil || sv == nil {
		return nil, err
	}
	p, err := checkSummary(id, sv)
	if err != nil {
		return nil, newRecordError(bucketSummaries, id, sv, "the list row", err)
	}
	return p, nil
}

// summaryValue is summary's encoded value.
func (v *view) summaryValue(id, stored []byte) ([]byte, error) {
	if stored == nil {
		e := v.puts[string(id)]
		if e == nil {
			return nil, nil
		}
		stored = e.summary
	}
	atts := v.atts[string(id)]
	if len(atts) == 0 {
		return stored, nil
	}
	// The summary shows the attempt with the highest Seq, if it has none
	// as high.
	last := atts[0]
	for _, r := range atts[1:] {
		if r.att.seq > last.att.seq {
			last = r
		}
	}
	s, changed, err := appendWithAttempt(make([]byte, 0, len(stored)+16), id, stored, &last.att)
	if err != nil {
		return nil, newRecordError(bucketSummaries, id, stored, "the list row", err)
	}
	if !changed {
		return stored, nil
	}
	return s, nil
}

// body returns the body of delivery id, from bbolt, its body file or
// pending; file is that body file's path when it came from one (the body
// is then the caller's: read, not mapped). A body that cannot be read is
// a *recordError.
func (v *view) body(id []byte) (body []byte, file string, err error) {
	if b := v.bodies.Get(id); b != nil {
		return b, "", nil
	}
	if v.bodyRefs != nil {
		if rv := v.bodyRefs.Get(id); rv != nil {
			r, err := decodeBodyRef(id, rv)
			if err != nil {
				return nil, "", newRecordError(bucketBodyRefs, id, rv, "the body", err)
			}
			file := v.files.path(r.file)
			b, err := v.files.read(r)
			if err != nil {
				return nil, "", newRecordError(bucketBodyRefs, id, rv, "the body", inBodyFile(file, err))
			}
			return b, file, nil
		}
	}
	if e := v.puts[string(id)]; e != nil {
		return e.body, "", nil
	}
	return nil, "", nil
}

// delivery returns delivery id with its body and attempts, copied out of
// the transaction and the journal's buffers. A delivery record that fails
// its checks, or is missing while its list row says it is there, is a
// *recordError: there is nothing to show. A body or an attempt that
// cannot be read (it fails its checks, its body file is damaged, cut
// short or missing) does not fail the read: the delivery comes back with
// the rest, the part marked with explain's error of it (BodyError,
// Attempt.ReadError), and partial says what is missing.
func (v *view) delivery(id string, explain func(error) error) (d *devhook.Delivery, partial *devhook.PartialError, err error) {
	key := []byte(id)
	meta := v.deliveries.Get(key)
	inBolt := meta != nil
	if !inBolt {
		e := v.puts[id]
		if e == nil {
			if v.tx.Bucket([]byte(bucketSummaries)).Get(key) != nil {
				return nil, nil, newRecordError(bucketDeliveries, key, nil, "the record", whyMissing)
			}
			return nil, nil, notFound(id)
		}
		meta = e.meta
	}
	d, sum, err := decodeMeta(key, meta)
	if err != nil {
		return nil, nil, newRecordError(bucketDeliveries, key, meta, "the record", err)
	}
	d.ID = id
	part := &devhook.PartialError{ID: id}
	if err := v.readBody(key, d, sum, inBolt); err != nil {
		part.Body = explain(err)
		d.Body, d.BodyError = nil, part.Body.Error()
	}
	if inBolt {
		c := v.attempts.Cursor()
		prefix := attemptPrefix(key)
		for k, val := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, val = c.Next() {
			what, seq := "an attempt", 0
			if len(k) == len(prefix)+4 {
				seq = int(binary.BigEndian.Uint32(k[len(prefix):]))
				what = fmt.Sprintf("attempt %d", seq)
			}
			err := verify(v.tx, k, val, what+" of delivery "+id)
			a := devhook.Attempt{}
			if err == nil {
				if a, err = decodeAttempt(k, val); err != nil {
					err = newRecordError(bucketAttempts, k, val, what, err)
				}
			}
			if err != nil {
				e := explain(err)
				part.Attempts = append(part.Attempts, e)
				a = devhook.Attempt{Seq: seq, ReadError: e.Error()}
			}
			d.Attempts = append(d.Attempts, a)
		}
	}
	extra := false
	for _, r := range v.atts[id] {
		if inBolt && v.attempts.Get(attemptKey(key, r.att.seq)) != nil {
			continue
		}
		a, err := decodeAttempt(nil, r.enc)
		if err != nil {
			return nil, nil, fmt.Errorf("attempt %d: %w", r.att.seq, err)
		}
		d.Attempts = append(d.Attempts, a)
		extra = true
	}
	if extra {
		slices.SortStableFunc(d.Attempts, func(a, b devhook.Attempt) int { return a.Seq - b.Seq })
	}
	for _, err := range v.attemptsAllThere(key, d) {
		e := explain(err)
		part.Attempts = append(part.Attempts, e)
		seq := len(d.Attempts) + 1
		if re := (*recordError)(nil); errors.As(err, &re) && len(re.key) == len(key)+5 {
			seq = int(binary.BigEndian.Uint32(re.key[len(key)+1:]))
		}
		d.Attempts = append(d.Attempts, devhook.Attempt{Seq: seq, ReadError: e.Error()})
	}
	slices.SortStableFunc(d.Attempts, func(a, b devhook.Attempt) int { return a.Seq - b.Seq })
	if part.Body == nil && len(part.Attempts) == 0 {
		return d, nil, nil
	}
	return d, part, nil
}

// readBody sets d.Body to the body of delivery key, checked against sum
// (and the checks bucket's checksum, inBolt): an error when it cannot be
// read whole.
func (v *view) readBody(key []byte, d *devhook.Delivery, sum bodySum, inBolt bool) error {
	body, file, err := v.body(key)
	if err != nil {
		return err
	}
	d.Body = body
	if file == "" {
		d.Body = append([]byte{}, body...) // out of bbolt's mapping, or the journal's
	}
	if err := checkBodySum(key, d.Body, file, sum); err != nil {
		return err
	}
	if inBolt {
		return verify(v.tx, key, d.Body, "the body of delivery "+string(key))
	}
	return nil
}

// checkBodySum checks body, read from its body file (file) or the store,
// against sum, the checksum its delivery record key holds: a *recordError
// that says where it is damaged when it does not match.
func checkBodySum(key, body []byte, file string, sum bodySum) error {
	if sum.matches(body) {
		return nil
	}
	if file != "" {
		return newRecordError(bucketBodyRefs, key, body, "the body", bodyFileDamage{path: file, why: whyBodyInFile})
	}
	return newRecordError(bucketBodies, key, body, "the body", whyChecksum)
}

// searchBody returns the body of delivery id for a search, checked as
// readBody checks it, without copying it: an error (a *recordError, an
// errValueDamaged) when it cannot be read whole. A delivery record that
// fails its checks does not tell the body's checksum: the body is then
// searched as it is (the list reports the record).
func (v *view) searchBody(id []byte) ([]byte, error) {
	body, file, err := v.body(id)
	if err != nil {
		return nil, err
	}
	meta := v.deliveries.Get(id)
	inBolt := meta != nil
	if !inBolt {
		if e := v.puts[string(id)]; e != nil {
			meta = e.meta
		}
	}
	sum, err := metaBodySum(id, meta)
	if err != nil || meta == nil {
		return body, nil
	}
	if err := checkBodySum(id, body, file, sum); err != nil {
		return nil, err
	}
	// The checks bucket holds the checksums of older records' bodies,
	// which their records do not.
	if inBolt && !sum.ok && verify(v.tx, id, body, "") != nil {
		return nil, errValueDamaged{"the body of delivery " + string(id)} // named only when it is
	}
	return body, nil
}

// attemptsAllThere returns an error for each attempt its list row counts,
// numbered from 1, that d lacks: one whose key was damaged is not found
// under its delivery, and would go missing silently. A list row that
// fails its own checks tells nothing (the list reports it).
func (v *view) attemptsAllThere(key []byte, d *devhook.Delivery) []error {
	p, err := v.summary(key, v.tx.Bucket([]byte(bucketSummaries)).Get(key))
	if err != nil || p == nil {
		return nil
	}
	f, err := scanSummary(p)
	if err != nil {
		return nil
	}
	var missing []error
	have := make(map[int]bool, len(d.Attempts))
	for _, a := range d.Attempts {
		have[a.Seq] = true
	}
	for seq := 1; seq <= max(f.attempts, len(d.Attempts)); seq++ {
		if !have[seq] {
			missing = append(missing, newRecordError(bucketAttempts, attemptKey(key, seq), nil, fmt.Sprintf("attempt %d", seq), whyMissing))
		}
	}
	return missing
}

package storage

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Deleting deliveries on request (devhook deliveries delete, the
// inspector's DELETE): a delivery goes with everything kept of it, its
// body, list row, attempts, checksums, run index entry and retry state.
//
// A delete wins over the journal. It holds the journal's flush lock from
// start to commit: it first applies every pending record to bbolt (a
// delivery recorded a moment ago is pending, and so is an attempt added
// to an older one), then deletes in bbolt, so that no record of a
// deleted delivery is left to a later flush or to Open's replay of the
// journal after a kill: the file whose records it applied is emptied by
// that flush. Records of those deliveries journaled meanwhile (an attempt
// of a retry that was under way) are taken out of what is pending; should
// the process be killed before they are dropped from the file too, Open
// drops them, their delivery being gone. A delete is a write: on a full
// disk it fails, and nothing is deleted.

// Selection chooses the deliveries DeleteMatching removes. The zero value
// chooses all of them.
type Selection struct {
	// Filter chooses by verdict, receiver status, run id and status_v2,
	// as List does. Its Limit and Before are not used; Text (a search of
	// the bodies) is not supported.
	Filter devhook.Filter
	// ReceivedBefore, when set, chooses only deliveries received before it.
	ReceivedBefore time.Time
}

// all reports whether s chooses every delivery.
func (s Selection) all() bool {
	f := s.Filter
	return s.ReceivedBefore.IsZero() && f.Verdict == "" && f.Status == 0 && f.RunID == "" && f.StatusV2 == ""
}

// Delete removes the deliveries ids, and returns those it removed, in
// the order given; an id that is not recorded is left out. It takes whole
// ids: Resolve turns a prefix into one.
func (db *DB) Delete(ids []string) ([]string, error) {
	if db.readOnly {
		return nil, fmt.Errorf("storage: delete deliveries: %w", errReadOnly)
	}
	seen := make(map[string]bool, len(ids))
	var want []string
	for _, id := range ids {
		if validID("delivery", id) == nil && !seen[id] {
			seen[id] = true
			want = append(want, id)
		}
	}
	var removed []string
	err := db.deleting(func() error {
		for len(want) > 0 {
			chunk := want[:min(len(want), pruneChunk)]
			want = want[len(chunk):]
			var found []string
			var zero []bodyRef
			err := db.safely(func() error {
				return db.bolt.Update(func(tx *bolt.Tx) error {
					found, zero = found[:0], zero[:0]
					if err := db.spaceLeft(); err != nil {
						return err
					}
					for _, id := range chunk {
						ok, err := deleteOne(tx, []byte(id), &zero)
						if err != nil {
							return fmt.Errorf("delivery %s: %w", id, err)
						}
						if ok {
							found = append(found, id)
						}
					}
					return putCount(tx, getCount(tx)-len(found))
				})
			})
			if err != nil {
				return err
			}
			db.bodies.toZero(zero)
			removed = append(removed, found...)
		}
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("storage: delete deliveries: %w", err)
	}
	if len(removed) > 0 {
		db.tidyBodyFiles()
	}
	return removed, nil
}

// Deleted is what DeleteMatching did.
type Deleted struct {
	// IDs are the deliveries removed, oldest first.
	IDs []string
	// Kept are the ids of the list rows, among those the selection looked
	// at, that fail their checks (damaged, or a newer devhook's): they
	// cannot be matched, and are kept as evidence. Delete removes them
	// by id, as does a selection of all.
	Kept []string
}

// DeleteMatching removes the deliveries that sel chooses. A list row that
// fails its checks cannot be matched and is kept, as evidence, and said
// (Deleted.Kept), unless sel chooses all: then every record goes,
// damaged ones too.
func (db *DB) DeleteMatching(sel Selection) (Deleted, error) {
	if db.readOnly {
		return Deleted{}, fmt.Errorf("storage: delete deliveries: %w", errReadOnly)
	}
	if sel.Filter.Text != "" {
		return Deleted{}, devhook.Errorf(devhook.EINVALID, "storage: deleting by the text of bodies is not supported")
	}
	var out Deleted
	err := db.deleting(func() error {
		if sel.all() {
			var err error
			out.IDs, err = db.deleteAll()
			return err
		}
		var after []byte // the last list row looked at
		for {
			ids, kept, next, err := db.deleteChunk(sel, after)
			out.IDs = append(out.IDs, ids...)
			out.Kept = append(out.Kept, kept...)
			if err != nil || next == nil {
				return err
			}
			after = next
		}
	})
	if err != nil {
		return out, fmt.Errorf("storage: delete deliveries: %w", err)
	}
	if len(out.IDs) > 0 {
		db.tidyBodyFiles()
	}
	return out, nil
}

// deleting runs del, which deletes in bbolt, after applying the journal,
// with no flush between the two; then it drops the records of deleted
// deliveries that were journaled meanwhile from what is pending.
func (db *DB) deleting(del func() error) error {
	j := db.journal
	j.flushMu.Lock()
	defer j.flushMu.Unlock()
	if err := db.flushLocked(); err != nil {
		return err
	}
	if err := del(); err != nil {
		return err
	}
	db.dropPendingOfGone()
	return nil
}

// dropPendingOfGone takes out of what is pending the records of
// deliveries that bbolt no longer has and that no pending record puts:
// attempts journaled after the delete's flush. j.flushMu is held.
func (db *DB) dropPendingOfGone() {
	j := db.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.pending) == 0 {
		return
	}
	puts := map[string]bool{}
	for i := range j.pending {
		if j.pending[i].kind == recPut {
			puts[j.pending[i].key] = true
		}
	}
	var gone map[string]bool
	_ = db.safely(func() error {
		return db.bolt.View(func(tx *bolt.Tx) error {
			s := tx.Bucket([]byte(bucketSummaries))
			for i := range j.pending {
				r := &j.pending[i]
				if r.kind == recAttempt && !puts[r.key] && s.Get(r.id) == nil {
					if gone == nil {
						gone = map[string]bool{}
					}
					gone[r.key] = true
				}
			}
			return nil
		})
	})
	if len(gone) == 0 {
		return
	}
	// Readers keep the old slice: a new one.
	kept := make([]jrec, 0, len(j.pending))
	j.bytes = 0
	for _, r := range j.pending {
		if !gone[r.key] {
			kept = append(kept, r)
			j.bytes += len(r.raw)
		}
	}
	j.pending = kept
	for id := range gone {
		delete(j.ids, id)
	}
	j.setOverMax()
}

// deleteOne deletes delivery id and what is kept of it, and reports
// whether it was there.
func deleteOne(tx *bolt.Tx, id []byte, zero *[]bodyRef) (bool, error) {
	sv := tx.Bucket([]byte(bucketSummaries)).Get(id)
	if sv == nil && tx.Bucket([]byte(bucketDeliveries)).Get(id) == nil {
		return false, nil
	}
	runID, known := "", false
	if sv != nil {
		if p, err := checkSummary(id, sv); err == nil {
			if s, err := decodeSummary(p); err == nil {
				runID, known = s.Event.RunID, true
			}
		}
	}
	if !known {
		// A damaged or missing list row does not say its run: the index
		// is searched.
		if err := deleteRunEntries(tx, id); err != nil {
			return false, err
		}
	}
	if err := deleteDelivery(tx, id, runID, zero); err != nil {
		return false, err
	}
	if owed := tx.Bucket([]byte(bucketOwed)); owed != nil {
		if err := owed.Delete(id); err != nil {
			return false, err
		}
	}
	return true, nil
}

// deleteRunEntries removes every run index entry of delivery id.
func deleteRunEntries(tx *bolt.Tx, id []byte) error {
	b := tx.Bucket([]byte(bucketRuns))
	suffix := append([]byte{0}, id...)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if bytes.HasSuffix(k, suffix) {
			keys = append(keys, bytes.Clone(k))
		}
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteChunk deletes up to pruneChunk deliveries that sel chooses among
// the list rows after after (nil: from the oldest), in one transaction.
// next is the last row it looked at when more may follow, else nil.
func (db *DB) deleteChunk(sel Selection, after []byte) (removed, kept []string, next []byte, err error) {
	var zero []bodyRef
	err = db.safely(func() error {
		return db.bolt.Update(func(tx *bolt.Tx) error {
			removed, kept, next, zero = nil, nil, nil, nil
			if err := db.spaceLeft(); err != nil {
				return err
			}
			var victims [][]byte
			c := tx.Bucket([]byte(bucketSummaries)).Cursor()
			k, v := c.First()
			if after != nil {
				if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			for ; k != nil; k, v = c.Next() {
				if len(victims) == pruneChunk {
					next = bytes.Clone(victims[len(victims)-1])
					break
				}
				p, err := checkSummary(k, v)
				var s devhook.Summary
				if err == nil {
					s, err = decodeSummary(p)
				}
				if err != nil {
					kept = append(kept, string(k)) // cannot be matched: kept, as evidence
					continue
				}
				if !sel.ReceivedBefore.IsZero() && !s.ReceivedAt.Before(sel.ReceivedBefore) {
					break // ids and ReceivedAt come from the same clock
				}
				if ok, err := matchSummary(p, &sel.Filter); err != nil || !ok {
					continue
				}
				victims = append(victims, bytes.Clone(k))
			}
			for _, id := range victims {
				if _, err := deleteOne(tx, id, &zero); err != nil {
					return fmt.Errorf("delivery %s: %w", id, err)
				}
				removed = append(removed, string(id))
			}
			return putCount(tx, getCount(tx)-len(victims))
		})
	})
	if err != nil {
		return nil, nil, nil, err
	}
	db.bodies.toZero(zero)
	return removed, kept, next, nil
}

// deleteAll empties the store: every delivery and what is kept of it,
// damaged records included. It returns the ids of the list rows and
// delivery records there were.
func (db *DB) deleteAll() ([]string, error) {
	var ids []string
	err := db.safely(func() error {
		return db.bolt.Update(func(tx *bolt.Tx) error {
			ids = nil
			if err := db.spaceLeft(); err != nil {
				return err
			}
			seen := map[string]bool{}
			for _, name := range []string{bucketSummaries, bucketDeliveries} {
				c := tx.Bucket([]byte(name)).Cursor()
				for k, _ := c.First(); k != nil; k, _ = c.Next() {
					if !seen[string(k)] {
						seen[string(k)] = true
						ids = append(ids, string(k))
					}
				}
			}
			for _, name := range []string{bucketDeliveries, bucketBodies, bucketSummaries, bucketAttempts, bucketRuns, bucketChecks, bucketOwed, bucketBodyRefs} {
				if tx.Bucket([]byte(name)) == nil {
					continue
				}
				if err := tx.DeleteBucket([]byte(name)); err != nil {
					return fmt.Errorf("empty %s: %w", name, err)
				}
			}
			for _, name := range allBuckets() {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			// No body file has a body in bbolt any more.
			files := tx.Bucket([]byte(bucketBodyFiles))
			for n, st := range bodyFileStates(tx) {
				st.bodies, st.damaged = 0, false
				if err := files.Put(fileKey(n), st.append(nil)); err != nil {
					return err
				}
			}
			return putCount(tx, 0)
		})
	})
	if err != nil {
		return nil, err
	}
	// The file being filled goes too: it holds bodies of what was
	// deleted.
	db.bodies.retire()
	db.tidyBodyFiles()
	db.damage.reset()
	slices.Sort(ids)
	return ids, nil
}

package boltrelay

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// The index of the queue's runs (bucket queueruns), for QueuedRuns.
//
// When an agent connects, the relay asks which runs the channel's queue
// holds (relay.QueueRunCounter, relay/behind.go). The run is in each
// delivery's body: reading it there meant reading and decoding every
// queued delivery, bodies included, at every connect, however large the
// queue (50,000 deliveries of 1 MB are within the default quotas). So
// each queue entry has an entry beside it in queueruns, of the same key,
// whose value is its delivery's run ("" for a delivery of no run), written
// and removed in the same transactions as the queue entry: QueuedRuns
// reads only those, a few dozen bytes a delivery.
//
// A file written before the index (or by an earlier devhook after it,
// which does not keep it) is mended when it is opened to write: the keys
// of each channel's queue and of its index are compared (keys only: no
// body is paged in), and the index of a channel whose keys differ is made
// again from its queue, reading each delivery once. When that fails (a
// full disk), Open goes on, and QueuedRuns fails until the next Open: the
// relay then holds every run.status delivery behind the queue, as with a
// store that cannot list the runs. Opened read-only, a file without the
// index is read as before, from the bodies.

var bucketRuns = []byte("queueruns")

// errNoIndex: the file has no index of the queue's runs yet.
var errNoIndex = errors.New("no index of the queue's runs")

// runOf is the run of a delivery with body: the run_id of a run.status
// body, "" for any other.
func runOf(body []byte) string { return devhook.ParseEvent(body).RunID }

// runOfEntry is the run of the delivery of queue entry v; ok is false when
// the entry cannot be decoded.
func runOfEntry(v []byte) (run string, ok bool) {
	d, err := storage.DecodeDelivery(v)
	if err != nil {
		return "", false
	}
	return runOf(d.Body), true
}

// putRun indexes delivery id of channel as of run, in tx. Without the
// index (not made at Open), nothing.
func putRun(tx *bolt.Tx, channel string, id []byte, run string) error {
	top := tx.Bucket(bucketRuns)
	if top == nil {
		return nil
	}
	idx, err := top.CreateBucketIfNotExists([]byte(channel))
	if err != nil {
		return err
	}
	idx.FillPercent = queueFill
	return idx.Put(id, []byte(run))
}

// dropRun forgets delivery id of channel, in tx.
func dropRun(tx *bolt.Tx, channel string, id []byte) error {
	top := tx.Bucket(bucketRuns)
	if top == nil {
		return nil
	}
	if idx := top.Bucket([]byte(channel)); idx != nil {
		return idx.Delete(id)
	}
	return nil
}

// dropRuns forgets channel's whole index, in tx, and a value damaged in
// its place.
func dropRuns(tx *bolt.Tx, channel []byte) error {
	top := tx.Bucket(bucketRuns)
	switch {
	case top == nil:
		return nil
	case top.Bucket(channel) != nil:
		return top.DeleteBucket(channel)
	case top.Get(channel) != nil:
		return top.Delete(channel)
	}
	return nil
}

// mendRuns makes the index agree with the queues: a channel whose index
// has not the keys of its queue is indexed again from its queue, and the
// index of a channel without a queue is dropped; a file without the index
// gets one. Called by Open, after the other buckets are made. Nothing is
// written when they agree.
func (s *Store) mendRuns() error {
	err := s.bolt.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRuns) == nil {
			return errNoIndex
		}
		return nil
	})
	if errors.Is(err, errNoIndex) {
		err = s.update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bucketRuns)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("boltrelay: make the index of the queue's runs: %w", err)
	}
	var stale [][]byte
	err = s.bolt.View(func(tx *bolt.Tx) error {
		stale = stale[:0]
		queue, runs := tx.Bucket(bucketQueue), tx.Bucket(bucketRuns)
		err := queue.ForEachBucket(func(ch []byte) error {
			if !sameKeys(queue.Bucket(ch), runs.Bucket(ch)) {
				stale = append(stale, bytes.Clone(ch))
			}
			return nil
		})
		if err != nil {
			return err
		}
		// An index without its queue, and a value where a channel's
		// index should be (damaged: putRun could not make the bucket,
		// and Enqueue would fail).
		return runs.ForEach(func(ch, v []byte) error {
			q := queue.Bucket(ch)
			if q == nil || v != nil && sameKeys(q, nil) { // else stale already
				stale = append(stale, bytes.Clone(ch))
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("boltrelay: check the index of the queue's runs: %w", err)
	}
	// One channel a transaction: each reads its queue's bodies once.
	for _, ch := range stale {
		err := s.update(func(tx *bolt.Tx) error {
			if err := dropRuns(tx, ch); err != nil {
				return err
			}
			q := tx.Bucket(bucketQueue).Bucket(ch)
			if q == nil {
				return nil
			}
			idx, err := tx.Bucket(bucketRuns).CreateBucket(ch)
			if err != nil {
				return err
			}
			idx.FillPercent = queueFill
			return q.ForEach(func(k, v []byte) error {
				run, _ := runOfEntry(v) // one that cannot be read is parked when the drain meets it
				return idx.Put(k, []byte(run))
			})
		})
		if err != nil {
			return fmt.Errorf("boltrelay: index the runs of channel %s's queue: %w", ch, err)
		}
	}
	return nil
}

// sameKeys reports whether buckets a and b (either may be nil: empty)
// have the same keys. Only keys are compared: a value larger than a page
// is not paged in.
func sameKeys(a, b *bolt.Bucket) bool {
	var ca, cb *bolt.Cursor
	var ka, kb []byte
	if a != nil {
		ca = a.Cursor()
		ka, _ = ca.First()
	}
	if b != nil {
		cb = b.Cursor()
		kb, _ = cb.First()
	}
	for ka != nil || kb != nil {
		if !bytes.Equal(ka, kb) {
			return false
		}
		ka, _ = ca.Next()
		kb, _ = cb.Next()
	}
	return true
}

// QueuedRuns implements relay.QueueRunCounter: the run (the run_id of a
// run.status body) of each such delivery in channel's queue, by id, read
// in one transaction from the index of the queue's runs, without reading
// a delivery. An entry that cannot be decoded is left out. In a file
// opened read-only that has no index (written by an earlier devhook),
// the deliveries are read.
func (s *Store) QueuedRuns(channel string) (map[string]string, error) {
	if err := storage.ValidID("channel", channel); err != nil {
		return nil, err
	}
	if s.runsErr != nil {
		return nil, fmt.Errorf("boltrelay: list the runs of channel %s's queue: the file was opened without them: %w", channel, s.runsErr)
	}
	var runs map[string]string
	err := s.bolt.View(func(tx *bolt.Tx) error {
		runs = nil
		top := tx.Bucket(bucketRuns)
		if top == nil {
			runs = scanRuns(tx.Bucket(bucketQueue).Bucket([]byte(channel)))
			return nil
		}
		idx := top.Bucket([]byte(channel))
		if idx == nil {
			runs = map[string]string{}
			return nil
		}
		n := 0
		idx.ForEach(func(_, v []byte) error {
			if len(v) > 0 {
				n++
			}
			return nil
		})
		runs = make(map[string]string, n)
		// A run's deliveries share one string of its run: a queue holds
		// many deliveries of few runs.
		names := make(map[string]string)
		return idx.ForEach(func(k, v []byte) error {
			if len(v) == 0 {
				return nil
			}
			run, ok := names[string(v)]
			if !ok {
				run = string(v)
				names[run] = run
			}
			runs[string(k)] = run
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltrelay: list the runs of channel %s's queue: %w", channel, err)
	}
	return runs, nil
}

// scanRuns is QueuedRuns from the queue q's deliveries themselves.
func scanRuns(q *bolt.Bucket) map[string]string {
	runs := make(map[string]string)
	if q == nil {
		return runs
	}
	q.ForEach(func(k, v []byte) error {
		if run, ok := runOfEntry(v); ok && run != "" {
			runs[string(k)] = run
		}
		return nil
	})
	return runs
}

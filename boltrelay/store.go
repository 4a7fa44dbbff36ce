// Package boltrelay is the single-process relay's store in a bbolt file
// (relay.db): its channels, the queue of deliveries waiting for their
// agent, the deliveries parked because they can never be sent, the
// quotas and sweeps of the queue, and the compaction of the file. It
// implements the relay's store interfaces (relay.Store, relay.Sweeper,
// relay.Counter and the parked deliveries' methods) as natsrelay does on
// NATS; relay/storetest runs against both.
//
// The file is opened, checked and refused when damaged as the agent's
// delivery store's is, and its queue entries are that store's delivery
// records: both come from package storage (storage/shared.go says why).
package boltrelay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// Store is the single-process relay's state in a bbolt file: its
// channels and the queue of deliveries waiting for their agent. It
// implements relay.Store. It has no journal: every write is committed and
// synced before it returns, since the relay answers 202 on the strength of
// an Enqueue.
//
// Layout (top-level buckets):
//
//	channels  channel id → relay.Channel as JSON
//	queue     channel id → bucket of delivery id → delivery with its body (storage.AppendDelivery)
//	parked    channel id → bucket of delivery id → uvarint reason length, reason, the queue entry
//	queueruns channel id → bucket of delivery id → the run of each queue entry's delivery, "" for none (runs.go)
//
// A relay.db written by earlier devhooks (one storage.DB for everything)
// opens as it is: its channels and queue are in the same buckets.
type Store struct {
	bolt  *bolt.DB
	path  string
	cfg   Config
	group storage.GroupCommit // every write is one of a group commit, fsynced
	usage usage               // what the queues hold, against cfg.Quota (quota.go)
	// runsErr: the index of the queue's runs could not be mended at
	// Open (runs.go); QueuedRuns fails with it until the next Open.
	runsErr error
}

// update runs fn in a write transaction, committed and synced before it
// returns, possibly with concurrent writes: one fsync for all the writes
// that arrived while the previous commit ran (storage.GroupCommit).
func (s *Store) update(fn func(*bolt.Tx) error) error {
	if s.cfg.WriteError != nil {
		inner := fn
		fn = func(tx *bolt.Tx) error {
			if err := s.cfg.WriteError(); err != nil {
				return err
			}
			return inner(tx)
		}
	}
	err := s.group.Update(s.bolt, fn)
	if isDiskFull(err) {
		err = fmt.Errorf("%w: %w", relay.ErrStorageFull, err)
	}
	return err
}

// Config configures Open. Zero values mean defaults.
type Config struct {
	// LockTimeout is how long Open waits for another process to
	// release the file; 0 = one second. A running relay holds it for as
	// long as it runs: the error then wraps storage.ErrLocked.
	LockTimeout time.Duration
	// ReadOnly opens an existing file to read it: writes fail. It still
	// waits for a process writing the file (a running relay) to release it.
	ReadOnly bool
	// Quota bounds the queue; zero values mean relay's defaults.
	Quota relay.Quota
	// WriteError, when set, is called in every write transaction, and an
	// error it returns fails that transaction as a failed write of the
	// file would: tests make the disk full with it (syscall.ENOSPC).
	WriteError func() error
}

var (
	bucketChannels = []byte("channels")
	bucketQueue    = []byte("queue")
	bucketParked   = []byte("parked")
)

// queueFill is the fill percent of a queue bucket: ids grow with time, so
// new keys land at the end.
const queueFill = 0.95

var relayBuckets = [][]byte{bucketChannels, bucketQueue, bucketParked}

// errForeign marks a bbolt file that is not a relay's.
var errForeign = errors.New("a bbolt file without devhook's schema")

var (
	_ relay.Store           = (*Store)(nil)
	_ relay.Counter         = (*Store)(nil)
	_ relay.QueueCounter    = (*Store)(nil)
	_ relay.QueueRunCounter = (*Store)(nil)
)

// Open opens or creates the relay's file at path, with its
// directory.
func Open(path string, cfg Config) (*Store, error) {
	if path == "" {
		return nil, devhook.Errorf(devhook.EINVALID, "boltrelay: no file path given")
	}
	if cfg.LockTimeout < 0 {
		return nil, devhook.Errorf(devhook.EINVALID, "boltrelay: negative LockTimeout")
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = time.Second
	}
	q, err := cfg.Quota.WithDefaults()
	if err != nil {
		return nil, devhook.Errorf(devhook.EINVALID, "boltrelay: %w", err)
	}
	cfg.Quota = q
	if cfg.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("boltrelay: open %s: %w", path, err)
		}
	}
	b, err := storage.OpenBolt(path, &bolt.Options{Timeout: cfg.LockTimeout, FreelistType: bolt.FreelistMapType, ReadOnly: cfg.ReadOnly})
	if err != nil {
		return nil, err
	}
	s := &Store{bolt: b, path: path, cfg: cfg}
	if cfg.ReadOnly {
		// A file of an earlier devhook may lack the parked bucket
		// until a relay opens it to write.
		err = b.View(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketChannels) == nil {
				return errForeign
			}
			return nil
		})
		if err != nil {
			b.Close()
			return nil, storage.DamagedFile(path, err)
		}
		return s, nil
	}
	err = b.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketChannels) == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return errForeign
			}
		}
		for _, name := range relayBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Close()
		if errors.Is(err, errForeign) {
			return nil, storage.DamagedFile(path, err)
		}
		return nil, fmt.Errorf("boltrelay: open %s: create buckets: %w", path, err)
	}
	s.runsErr = s.mendRuns()
	if err := s.countUsage(); err != nil {
		b.Close()
		return nil, fmt.Errorf("boltrelay: open %s: %w", path, err)
	}
	return s, nil
}

// Close closes the file.
func (s *Store) Close() error {
	if err := s.bolt.Close(); err != nil {
		return fmt.Errorf("boltrelay: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// PutChannel creates or replaces a channel.
func (s *Store) PutChannel(ch relay.Channel) error {
	if err := storage.ValidID("channel", ch.ID); err != nil {
		return err
	}
	v, err := json.Marshal(ch)
	if err != nil {
		return fmt.Errorf("boltrelay: put channel %s: %w", ch.ID, err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChannels).Put([]byte(ch.ID), v)
	})
	if err != nil {
		return fmt.Errorf("boltrelay: put channel %s: %w", ch.ID, err)
	}
	return nil
}

// Channel returns channel id, or an error with code devhook.ENOTFOUND.
func (s *Store) Channel(id string) (relay.Channel, error) {
	notFound := devhook.Errorf(devhook.ENOTFOUND, "channel %.200q not found", id)
	if storage.ValidID("channel", id) != nil {
		// Channel ids come from URLs: one that could not have been
		// stored is simply not there.
		return relay.Channel{}, notFound
	}
	var ch relay.Channel
	found := false
	err := s.bolt.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketChannels).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &ch) // copies out of the map
	})
	switch {
	case err != nil:
		return relay.Channel{}, fmt.Errorf("boltrelay: read channel %s: %w", id, err)
	case !found:
		return relay.Channel{}, notFound
	}
	return ch, nil
}

// Enqueue keeps d, with its body, in channel's queue until Dequeue or
// Park. The same id twice is kept once. It returns once the delivery is
// on disk.
func (s *Store) Enqueue(channel string, d *devhook.Delivery) error {
	if err := storage.ValidID("channel", channel); err != nil {
		return err
	}
	if d == nil {
		return devhook.Errorf(devhook.EINVALID, "boltrelay: enqueue: no delivery")
	}
	if err := storage.ValidID("delivery", d.ID); err != nil {
		return err
	}
	id := []byte(d.ID)
	v := storage.AppendDelivery(make([]byte, 0, 256+len(d.Body)), d)
	run := runOf(d.Body)
	size := entrySize(id, v)
	if err := s.usage.reserve(channel, size, s.cfg.Quota); err != nil {
		if s.isQueued(channel, id) {
			return nil // kept once: a full queue refuses only new deliveries
		}
		return fmt.Errorf("boltrelay: enqueue delivery %s for channel %s: %w", d.ID, channel, err)
	}
	dup := false
	err := s.update(func(tx *bolt.Tx) error {
		dup = false
		q, err := tx.Bucket(bucketQueue).CreateBucketIfNotExists([]byte(channel))
		if err != nil {
			return err
		}
		if q.Get(id) != nil {
			dup = true
			return nil
		}
		q.FillPercent = queueFill
		if err := q.Put(id, v); err != nil {
			return err
		}
		return putRun(tx, channel, id, run)
	})
	if err != nil || dup {
		s.usage.release(channel, size, 1)
	}
	if err != nil {
		return fmt.Errorf("boltrelay: enqueue delivery %s for channel %s: %w", d.ID, channel, err)
	}
	return nil
}

// Queued returns up to limit deliveries of channel's queue with ids after
// after ("" = from the start), in id order, bodies included. limit <= 0
// means no limit. An entry that cannot be decoded ends the batch with an
// error wrapping *relay.UnreadableError.
func (s *Store) Queued(channel string, after string, limit int) ([]*devhook.Delivery, error) {
	if err := storage.ValidID("channel", channel); err != nil {
		return nil, err
	}
	var out []*devhook.Delivery
	var bad error
	err := s.bolt.View(func(tx *bolt.Tx) error {
		out, bad = out[:0], nil
		q := tx.Bucket(bucketQueue).Bucket([]byte(channel))
		if q == nil {
			return nil
		}
		c := q.Cursor()
		k, v := c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			d, err := storage.DecodeDelivery(v)
			if err != nil {
				bad = &relay.UnreadableError{ID: string(k), Err: err}
				return nil
			}
			if d.Body == nil {
				d.Body = []byte{}
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("boltrelay: read queue of channel %s: %w", channel, err)
	}
	if bad != nil {
		return out, fmt.Errorf("boltrelay: read queue of channel %s: %w", channel, bad)
	}
	return out, nil
}

// Dequeue removes deliveries ids from channel's queue, all in one
// transaction: one fsync for the batch of acknowledgements the relay
// gathered. An id not in the queue is skipped: acknowledgements may
// repeat. It returns once the removal is on disk; when it fails, none of
// them is removed.
func (s *Store) Dequeue(channel string, ids ...string) error {
	if err := storage.ValidID("channel", channel); err != nil {
		return err
	}
	for _, id := range ids {
		if err := storage.ValidID("delivery", id); err != nil {
			return err
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var size int64
	var n int
	err := s.update(func(tx *bolt.Tx) error {
		size, n = 0, 0
		q := tx.Bucket(bucketQueue).Bucket([]byte(channel))
		if q == nil {
			return nil
		}
		for _, id := range ids {
			k := []byte(id)
			v := q.Get(k)
			if v == nil {
				continue // not queued, or twice in ids
			}
			size += entrySize(k, v) // v is not to be read once removed
			n++
			if err := q.Delete(k); err != nil {
				return err
			}
			if err := dropRun(tx, channel, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltrelay: dequeue %s of channel %s: %w", deliveries(ids), channel, err)
	}
	if n > 0 {
		s.usage.release(channel, size, n)
	}
	return nil
}

// deliveries names ids in an error: the delivery, or how many and the
// first.
func deliveries(ids []string) string {
	if len(ids) == 1 {
		return "delivery " + ids[0]
	}
	return fmt.Sprintf("%d deliveries (%s first)", len(ids), ids[0])
}

// takeQueued runs take in one write transaction on delivery id of
// channel's queue (q, and its entry v), when it is queued, and gives its
// quota back once take has removed it. An id not in the queue is not an
// error, and take is not called.
func (s *Store) takeQueued(channel, id string, take func(tx *bolt.Tx, q *bolt.Bucket, v []byte) error) error {
	if err := storage.ValidID("channel", channel); err != nil {
		return err
	}
	if err := storage.ValidID("delivery", id); err != nil {
		return err
	}
	var size int64
	err := s.update(func(tx *bolt.Tx) error {
		size = 0
		q := tx.Bucket(bucketQueue).Bucket([]byte(channel))
		if q == nil {
			return nil
		}
		v := q.Get([]byte(id))
		if v == nil {
			return nil
		}
		size = entrySize([]byte(id), v) // v is not to be read once take removed it
		if err := take(tx, q, v); err != nil {
			return err
		}
		return dropRun(tx, channel, []byte(id))
	})
	if err != nil {
		return err
	}
	if size > 0 {
		s.usage.release(channel, size, 1)
	}
	return nil
}

// QueueLen returns the number of deliveries in channel's queue.
func (s *Store) QueueLen(channel string) (n int, err error) {
	if err := storage.ValidID("channel", channel); err != nil {
		return 0, err
	}
	err = s.bolt.View(func(tx *bolt.Tx) error {
		if q := tx.Bucket(bucketQueue).Bucket([]byte(channel)); q != nil {
			n = q.Stats().KeyN
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("boltrelay: count queue of channel %s: %w", channel, err)
	}
	return n, nil
}

// Counts implements relay.Counter: the channels, and the deliveries queued
// and parked over all channels, for /metrics.
func (s *Store) Counts() (relay.Counts, error) {
	var n relay.Counts
	err := s.bolt.View(func(tx *bolt.Tx) error {
		n.Channels = tx.Bucket(bucketChannels).Stats().KeyN
		q := tx.Bucket(bucketQueue)
		err := q.ForEachBucket(func(k []byte) error {
			n.Queued += q.Bucket(k).Stats().KeyN
			return nil
		})
		if err != nil {
			return err
		}
		n.Parked, err = parkedCount(tx)
		return err
	})
	if err != nil {
		return relay.Counts{}, fmt.Errorf("boltrelay: count channels, queue and parked deliveries: %w", err)
	}
	return n, nil
}

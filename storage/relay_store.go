package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	bolt "go.etcd.io/bbolt"
)

// RelayStore is the single-process relay's state in a bbolt file: its
// channels and the queue of deliveries waiting for their agent. It
// implements relay.Store. It has no journal: every write is committed and
// synced before it returns, since the relay answers 202 on the strength of
// an Enqueue.
//
// Layout (top-level buckets):
//
//	channels  channel id → relay.Channel as JSON
//	queue     channel id → bucket of delivery id → delivery with its body (appendMeta)
//	parked    channel id → bucket of delivery id → uvarint reason length, reason, the queue entry
//
// A relay.db written by earlier devhooks (one storage.DB for everything)
// opens as it is: its channels and queue are in the same buckets.
type RelayStore struct {
	bolt  *bolt.DB
	path  string
	cfg   RelayStoreConfig
	group group // every write is one of a group commit, fsynced
	usage usage // what the queues hold, against cfg.Quota (relay_quota.go)
}

// update runs fn in a write transaction, committed and synced before it
// returns, possibly with concurrent writes: one fsync for all the writes
// that arrived while the previous commit ran (see group.go).
func (s *RelayStore) update(fn func(*bolt.Tx) error) error {
	if s.cfg.WriteError != nil {
		inner := fn
		fn = func(tx *bolt.Tx) error {
			if err := s.cfg.WriteError(); err != nil {
				return err
			}
			return inner(tx)
		}
	}
	err := s.group.update(s.bolt, fn)
	if isDiskFull(err) {
		err = fmt.Errorf("%w: %w", relay.ErrStorageFull, err)
	}
	return err
}

// RelayStoreConfig configures OpenRelayStore. Zero values mean defaults.
type RelayStoreConfig struct {
	// LockTimeout is how long OpenRelayStore waits for another process to
	// release the file; 0 = one second. A running relay holds it for as
	// long as it runs: the error then wraps ErrLocked.
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

var (
	_ relay.Store   = (*RelayStore)(nil)
	_ relay.Counter = (*RelayStore)(nil)
)

// OpenRelayStore opens or creates the relay's file at path, with its
// directory.
func OpenRelayStore(path string, cfg RelayStoreConfig) (*RelayStore, error) {
	if path == "" {
		return nil, devhook.Errorf(devhook.EINVALID, "storage: no file path given")
	}
	if cfg.LockTimeout < 0 {
		return nil, devhook.Errorf(devhook.EINVALID, "storage: negative LockTimeout")
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = time.Second
	}
	q, err := cfg.Quota.WithDefaults()
	if err != nil {
		return nil, devhook.Errorf(devhook.EINVALID, "storage: %v", err)
	}
	cfg.Quota = q
	if cfg.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("storage: open %s: %w", path, err)
		}
	}
	b, err := openFile(path, &bolt.Options{Timeout: cfg.LockTimeout, FreelistType: bolt.FreelistMapType, ReadOnly: cfg.ReadOnly})
	if err != nil {
		return nil, err
	}
	s := &RelayStore{bolt: b, path: path, cfg: cfg}
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
			return nil, corruptError(path, err)
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
			return nil, corruptError(path, err)
		}
		return nil, fmt.Errorf("storage: open %s: create buckets: %w", path, err)
	}
	if err := s.countUsage(); err != nil {
		b.Close()
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	return s, nil
}

// Close closes the file.
func (s *RelayStore) Close() error {
	if err := s.bolt.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the file's path.
func (s *RelayStore) Path() string { return s.path }

// PutChannel creates or replaces a channel.
func (s *RelayStore) PutChannel(ch relay.Channel) error {
	if err := validID("channel", ch.ID); err != nil {
		return err
	}
	v, err := json.Marshal(ch)
	if err != nil {
		return fmt.Errorf("storage: put channel %s: %w", ch.ID, err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChannels).Put([]byte(ch.ID), v)
	})
	if err != nil {
		return fmt.Errorf("storage: put channel %s: %w", ch.ID, err)
	}
	return nil
}

// Channel returns channel id, or an error with code devhook.ENOTFOUND.
func (s *RelayStore) Channel(id string) (relay.Channel, error) {
	notFound := devhook.Errorf(devhook.ENOTFOUND, "channel %.200q not found", id)
	if validID("channel", id) != nil {
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
		return relay.Channel{}, fmt.Errorf("storage: read channel %s: %w", id, err)
	case !found:
		return relay.Channel{}, notFound
	}
	return ch, nil
}

// Enqueue keeps d, with its body, in channel's queue until Dequeue or
// Park. The same id twice is kept once. It returns once the delivery is
// on disk.
func (s *RelayStore) Enqueue(channel string, d *devhook.Delivery) error {
	if err := validID("channel", channel); err != nil {
		return err
	}
	if d == nil {
		return devhook.Errorf(devhook.EINVALID, "storage: enqueue: no delivery")
	}
	if err := validID("delivery", d.ID); err != nil {
		return err
	}
	id := []byte(d.ID)
	v := appendMeta(make([]byte, 0, 256+len(d.Body)), d, true)
	size := entrySize(id, v)
	if err := s.usage.reserve(channel, size, s.cfg.Quota); err != nil {
		if s.isQueued(channel, id) {
			return nil // kept once: a full queue refuses only new deliveries
		}
		return fmt.Errorf("storage: enqueue delivery %s for channel %s: %w", d.ID, channel, err)
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
		return q.Put(id, v)
	})
	if err != nil || dup {
		s.usage.release(channel, size, 1)
	}
	if err != nil {
		return fmt.Errorf("storage: enqueue delivery %s for channel %s: %w", d.ID, channel, err)
	}
	return nil
}

// Queued returns up to limit deliveries of channel's queue with ids after
// after ("" = from the start), in id order, bodies included. limit <= 0
// means no limit. An entry that cannot be decoded ends the batch with an
// error wrapping *relay.UnreadableError.
func (s *RelayStore) Queued(channel string, after string, limit int) ([]*devhook.Delivery, error) {
	if err := validID("channel", channel); err != nil {
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
			d, err := decodeMeta(v)
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
		return nil, fmt.Errorf("storage: read queue of channel %s: %w", channel, err)
	}
	if bad != nil {
		return out, fmt.Errorf("storage: read queue of channel %s: %w", channel, bad)
	}
	return out, nil
}

// Dequeue removes delivery id from channel's queue. An id not in the queue
// is not an error: acknowledgements may repeat.
func (s *RelayStore) Dequeue(channel, id string) error {
	if err := validID("channel", channel); err != nil {
		return err
	}
	if err := validID("delivery", id); err != nil {
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
		size = entrySize([]byte(id), v)
		return q.Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("storage: dequeue delivery %s of channel %s: %w", id, channel, err)
	}
	if size > 0 {
		s.usage.release(channel, size, 1)
	}
	return nil
}

// QueueLen returns the number of deliveries in channel's queue.
func (s *RelayStore) QueueLen(channel string) (n int, err error) {
	if err := validID("channel", channel); err != nil {
		return 0, err
	}
	err = s.bolt.View(func(tx *bolt.Tx) error {
		if q := tx.Bucket(bucketQueue).Bucket([]byte(channel)); q != nil {
			n = q.Stats().KeyN
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storage: count queue of channel %s: %w", channel, err)
	}
	return n, nil
}

// Counts implements relay.Counter: the channels, and the deliveries queued
// and parked over all channels, for /metrics.
func (s *RelayStore) Counts() (relay.Counts, error) {
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
		return relay.Counts{}, fmt.Errorf("storage: count channels, queue and parked deliveries: %w", err)
	}
	return n, nil
}

package boltrelay

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// The relay store's quotas (relay.Quota) and sweeps (relay.Sweeper).
//
// What each channel's queue holds, in entries and bytes (key and value of
// each entry), is counted once when the file is opened and then kept in
// memory: Enqueue reserves an entry's bytes before it writes, so that
// concurrent writers cannot together pass a quota, and gives them back
// when the write fails or the id was queued already; Dequeue, Park,
// Expire and RemoveIdleChannels give back what they removed, once it is
// committed. Parked deliveries are not counted: they are not queued.
//
// bbolt reuses the pages freed by removed entries, so that relay.db stays
// within the quota and bbolt's overhead across floods and drains; it does
// not give them back to the disk by itself: Compact does.

var _ relay.Sweeper = (*Store)(nil)

// usage is what the queues hold.
type usage struct {
	mu    sync.Mutex
	total int64
	chans map[string]chanUsage
}

type chanUsage struct {
	bytes int64
	n     int
}

// entrySize is the bytes a queue entry counts for.
func entrySize(k, v []byte) int64 { return int64(len(k) + len(v)) }

// reserve counts size bytes and one entry more for channel, or returns an
// error wrapping relay.ErrChannelFull or relay.ErrQueueFull when that
// would pass q.
func (u *usage) reserve(channel string, size int64, q relay.Quota) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.chans[channel]
	switch {
	case c.bytes+size > q.ChannelBytes:
		return fmt.Errorf("%w: it holds %d bytes, the delivery takes %d, the quota is %d", relay.ErrChannelFull, c.bytes, size, q.ChannelBytes)
	case c.n+1 > q.ChannelDeliveries:
		return fmt.Errorf("%w: it holds %d deliveries, the quota", relay.ErrChannelFull, c.n)
	case u.total+size > q.TotalBytes:
		return fmt.Errorf("%w: the queues hold %d bytes, the delivery takes %d, the quota is %d", relay.ErrQueueFull, u.total, size, q.TotalBytes)
	}
	c.bytes += size
	c.n++
	if u.chans == nil {
		u.chans = make(map[string]chanUsage)
	}
	u.chans[channel] = c
	u.total += size
	return nil
}

// release counts size bytes and n entries less for channel.
func (u *usage) release(channel string, size int64, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.chans[channel]
	c.bytes -= size
	c.n -= n
	u.total -= size
	if c.n <= 0 {
		delete(u.chans, channel)
	} else {
		u.chans[channel] = c
	}
}

// countUsage counts what the queues hold, from the file.
func (s *Store) countUsage() error {
	chans := make(map[string]chanUsage)
	var total int64
	err := s.bolt.View(func(tx *bolt.Tx) error {
		top := tx.Bucket(bucketQueue)
		if top == nil {
			return nil
		}
		return top.ForEachBucket(func(ch []byte) error {
			var c chanUsage
			cur := top.Bucket(ch).Cursor()
			// Only the entries' lengths are read: an entry larger than a
			// page is not paged in.
			for k, v := cur.First(); k != nil; k, v = cur.Next() {
				c.bytes += entrySize(k, v)
				c.n++
			}
			if c.n > 0 {
				chans[string(ch)] = c
				total += c.bytes
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("count the queues: %w", err)
	}
	s.usage.mu.Lock()
	s.usage.chans, s.usage.total = chans, total
	s.usage.mu.Unlock()
	return nil
}

// QueueUsage returns the bytes and deliveries queued for channel, and the
// bytes queued for all channels, as the quotas count them.
func (s *Store) QueueUsage(channel string) (bytes int64, deliveries int, total int64) {
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	c := s.usage.chans[channel]
	return c.bytes, c.n, s.usage.total
}

// isQueued reports whether delivery id is in channel's queue.
func (s *Store) isQueued(channel string, id []byte) bool {
	found := false
	s.bolt.View(func(tx *bolt.Tx) error {
		if q := tx.Bucket(bucketQueue).Bucket([]byte(channel)); q != nil {
			found = q.Get(id) != nil
		}
		return nil
	})
	return found
}

// isDiskFull reports whether err is a write that found no room.
func isDiskFull(err error) bool {
	return err != nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT))
}

// expireBatch bounds the entries one transaction of Expire removes.
const expireBatch = 1000

// Expire implements relay.Sweeper: the queued deliveries received before
// now less the quota's MaxAge are removed, oldest first (ids are
// time-ordered), in transactions of at most expireBatch entries.
func (s *Store) Expire(now time.Time) ([]relay.Expired, error) {
	cutoff := now.Add(-s.cfg.Quota.MaxAge)
	byChannel := map[string]*relay.Expired{}
	var order []string
	for {
		type gone struct {
			channel string
			size    int64
		}
		var removed []gone
		err := s.update(func(tx *bolt.Tx) error {
			removed = removed[:0]
			top := tx.Bucket(bucketQueue)
			var keys [][2][]byte // channel, id
			err := top.ForEachBucket(func(ch []byte) error {
				cur := top.Bucket(ch).Cursor()
				for k, v := cur.First(); k != nil && len(keys) < expireBatch; k, v = cur.Next() {
					t := relay.IDTime(string(k))
					if t.IsZero() {
						d, err := storage.DecodeDelivery(v)
						if err != nil || d.ReceivedAt.IsZero() {
							continue // the drain parks what cannot be read
						}
						t = d.ReceivedAt
					}
					if !t.Before(cutoff) {
						break // the ids that follow are younger
					}
					keys = append(keys, [2][]byte{ch, k})
					removed = append(removed, gone{string(ch), entrySize(k, v)})
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range keys {
				if err := dropRun(tx, string(k[0]), k[1]); err != nil {
					return err
				}
				if err := top.Bucket(k[0]).Delete(k[1]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return flatten(byChannel, order), fmt.Errorf("boltrelay: drop expired deliveries: %w", err)
		}
		for _, g := range removed {
			s.usage.release(g.channel, g.size, 1)
			e := byChannel[g.channel]
			if e == nil {
				e = &relay.Expired{Channel: g.channel}
				byChannel[g.channel] = e
				order = append(order, g.channel)
			}
			e.Deliveries++
			e.Bytes += g.size
		}
		if len(removed) < expireBatch {
			return flatten(byChannel, order), nil
		}
	}
}

func flatten(m map[string]*relay.Expired, order []string) []relay.Expired {
	out := make([]relay.Expired, 0, len(order))
	for _, ch := range order {
		out = append(out, *m[ch])
	}
	return out
}

// TouchChannel implements relay.Sweeper. A channel not found is not an
// error: it was removed.
func (s *Store) TouchChannel(id string, t time.Time) error {
	if err := storage.ValidID("channel", id); err != nil {
		return err
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChannels)
		v := b.Get([]byte(id))
		if v == nil {
			return nil
		}
		var ch relay.Channel
		if err := json.Unmarshal(v, &ch); err != nil {
			return err
		}
		if !t.After(ch.LastOpened) {
			return nil
		}
		ch.LastOpened = t.UTC()
		nv, err := json.Marshal(ch)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), nv)
	})
	if err != nil {
		return fmt.Errorf("boltrelay: record that channel %s was opened: %w", id, err)
	}
	return nil
}

// RemoveIdleChannels implements relay.Sweeper: the channels idle since
// before go, with their queued and parked deliveries, unless inUse says
// an agent holds them, and so do queues whose channel is gone (a delivery
// queued as its channel was removed). The channels are read first, inUse
// asked outside the write, and each one checked again as it is removed.
func (s *Store) RemoveIdleChannels(before time.Time, inUse func(channel string) bool) ([]relay.RemovedChannel, error) {
	var idle []string
	ghosts := false
	err := s.bolt.View(func(tx *bolt.Tx) error {
		chans, queue := tx.Bucket(bucketChannels), tx.Bucket(bucketQueue)
		err := chans.ForEach(func(k, v []byte) error {
			var ch relay.Channel
			if json.Unmarshal(v, &ch) == nil && ch.IdleSince(before) {
				idle = append(idle, string(k))
			}
			return nil // one that cannot be read is not removed: it cannot be read to say
		})
		if err != nil {
			return err
		}
		return queue.ForEachBucket(func(k []byte) error {
			ghosts = ghosts || chans.Get(k) == nil
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltrelay: remove idle channels: %w", err)
	}
	drop := make(map[string]bool, len(idle))
	for _, id := range idle {
		if inUse == nil || !inUse(id) {
			drop[id] = true
		}
	}
	if len(drop) == 0 && !ghosts {
		return nil, nil // no write, no fsync
	}
	var out []relay.RemovedChannel
	var queued []chanUsage // of out's queues, as the quotas count them
	err = s.update(func(tx *bolt.Tx) error {
		out = out[:0]
		chans, queue, parked := tx.Bucket(bucketChannels), tx.Bucket(bucketQueue), tx.Bucket(bucketParked)
		for _, id := range idle {
			if !drop[id] {
				continue
			}
			v := chans.Get([]byte(id))
			var ch relay.Channel
			if v == nil || json.Unmarshal(v, &ch) != nil || !ch.IdleSince(before) {
				continue // opened meanwhile, or gone
			}
			last := ch.LastOpened
			if last.IsZero() {
				last = ch.CreatedAt
			}
			out = append(out, relay.RemovedChannel{ID: id, LastOpened: last})
		}
		err := queue.ForEachBucket(func(k []byte) error {
			if chans.Get(k) == nil {
				out = append(out, relay.RemovedChannel{ID: string(k)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		queued = make([]chanUsage, len(out))
		for i := range out {
			rc := &out[i]
			id := []byte(rc.ID)
			for j, top := range []*bolt.Bucket{queue, parked} {
				b := top.Bucket(id)
				if b == nil {
					continue
				}
				cur := b.Cursor()
				for k, v := cur.First(); k != nil; k, v = cur.Next() {
					rc.Deliveries++
					rc.Bytes += entrySize(k, v)
					if j == 0 {
						queued[i].n++
						queued[i].bytes += entrySize(k, v)
					}
				}
				if err := top.DeleteBucket(id); err != nil {
					return err
				}
			}
			if err := dropRuns(tx, id); err != nil {
				return err
			}
			if chans.Get(id) != nil {
				if err := chans.Delete(id); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("boltrelay: remove idle channels: %w", err)
	}
	for i, rc := range out {
		if queued[i].n > 0 {
			s.usage.release(rc.ID, queued[i].bytes, queued[i].n)
		}
	}
	return out, nil
}

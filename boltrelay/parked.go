package boltrelay

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// Parked deliveries: those the relay can never send to their agent, set
// aside by Park with the reason so that the queue behind them goes on.
// They stay in the parked bucket (channel id → bucket of delivery id →
// uvarint reason length, reason, the queue entry as it was) until an
// operator puts one back in its channel's queue (Requeue) or drops it
// (DropParked), with devhook relay parked.

// Park moves delivery id from channel's queue to the parked bucket, with
// the reason. An id not in the queue is not an error.
func (s *Store) Park(channel, id, reason string) error {
	err := s.takeQueued(channel, id, func(tx *bolt.Tx, q *bolt.Bucket, v []byte) error {
		p, err := tx.Bucket(bucketParked).CreateBucketIfNotExists([]byte(channel))
		if err != nil {
			return err
		}
		pv := binary.AppendUvarint(make([]byte, 0, 10+len(reason)+len(v)), uint64(len(reason)))
		pv = append(append(pv, reason...), v...)
		if err := p.Put([]byte(id), pv); err != nil {
			return err
		}
		return q.Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("boltrelay: park delivery %s of channel %s: %w", id, channel, err)
	}
	return nil
}

// splitParked splits a parked entry into its reason and queue entry; ok
// is false for an entry too damaged to say.
func splitParked(v []byte) (reason string, entry []byte, ok bool) {
	n, w := binary.Uvarint(v)
	if w <= 0 || n > uint64(len(v)-w) {
		return "", nil, false
	}
	return string(v[w : w+int(n)]), v[w+int(n):], true
}

// parkedOf decodes the parked entry v of delivery id in channel, with the
// delivery's body when body is set.
func parkedOf(channel, id string, v []byte, body bool) relay.Parked {
	p := relay.Parked{Channel: channel, ID: id, ReceivedAt: relay.IDTime(id), Size: -1}
	reason, entry, ok := splitParked(v)
	if !ok {
		p.Reason = "(the parked entry is damaged)"
		return p
	}
	p.Reason = reason
	if d, err := storage.DecodeDelivery(entry); err == nil {
		p.Delivery, p.Size = d, len(d.Body)
		if !d.ReceivedAt.IsZero() {
			p.ReceivedAt = d.ReceivedAt
		}
		if !body {
			d.Body = nil
		}
	}
	return p
}

// ListParked returns the parked deliveries of channel, or of every
// channel when channel is "", by channel then id, without their bodies.
func (s *Store) ListParked(channel string) ([]relay.Parked, error) {
	if channel != "" {
		if err := storage.ValidID("channel", channel); err != nil {
			return nil, err
		}
	}
	var out []relay.Parked
	err := s.bolt.View(func(tx *bolt.Tx) error {
		out = out[:0]
		top := tx.Bucket(bucketParked)
		if top == nil {
			return nil // read-only, in a file of an earlier devhook
		}
		return top.ForEachBucket(func(ch []byte) error {
			if channel != "" && string(ch) != channel {
				return nil
			}
			return top.Bucket(ch).ForEach(func(k, v []byte) error {
				out = append(out, parkedOf(string(ch), string(k), v, false))
				return nil
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltrelay: read parked deliveries: %w", err)
	}
	return out, nil
}

// findParked returns the channel and entry of parked delivery id, or an
// error with code devhook.ENOTFOUND. v is valid for tx's life.
func findParked(tx *bolt.Tx, id string) (channel string, v []byte, err error) {
	top := tx.Bucket(bucketParked)
	if top == nil { // read-only, in a file of an earlier devhook
		return "", nil, devhook.Errorf(devhook.ENOTFOUND, "no parked delivery %.200q", id)
	}
	err = top.ForEachBucket(func(ch []byte) error {
		if channel != "" {
			return nil
		}
		if pv := top.Bucket(ch).Get([]byte(id)); pv != nil {
			channel, v = string(ch), pv
		}
		return nil
	})
	if err == nil && channel == "" {
		err = devhook.Errorf(devhook.ENOTFOUND, "no parked delivery %.200q", id)
	}
	return channel, v, err
}

// ParkedDelivery returns parked delivery id, body included, or an error
// with code devhook.ENOTFOUND.
func (s *Store) ParkedDelivery(id string) (relay.Parked, error) {
	if err := storage.ValidID("delivery", id); err != nil {
		return relay.Parked{}, err
	}
	var p relay.Parked
	err := s.bolt.View(func(tx *bolt.Tx) error {
		channel, v, err := findParked(tx, id)
		if err != nil {
			return err
		}
		p = parkedOf(channel, id, v, true)
		return nil
	})
	if err != nil {
		return relay.Parked{}, fmt.Errorf("boltrelay: read parked delivery %s: %w", id, err)
	}
	return p, nil
}

// Requeue moves parked delivery id back to the end of its channel's
// queue, as it was queued, and returns it without its body. The relay
// sends it when the channel's agent connects. An entry too damaged to
// say where its delivery begins cannot be requeued.
func (s *Store) Requeue(id string) (relay.Parked, error) {
	// The operator's choice: it may take the queue over its quota.
	defer s.countUsage()
	return s.takeParked(id, "requeue", func(tx *bolt.Tx, channel string, entry []byte) error {
		if entry == nil {
			return devhook.Errorf(devhook.EINVALID, "the parked entry is damaged: drop it")
		}
		q, err := tx.Bucket(bucketQueue).CreateBucketIfNotExists([]byte(channel))
		if err != nil {
			return err
		}
		q.FillPercent = queueFill
		if err := q.Put([]byte(id), entry); err != nil {
			return err
		}
		run, _ := runOfEntry(entry)
		return putRun(tx, channel, []byte(id), run)
	})
}

// DropParked deletes parked delivery id for good and returns it without
// its body.
func (s *Store) DropParked(id string) (relay.Parked, error) {
	return s.takeParked(id, "drop", func(*bolt.Tx, string, []byte) error { return nil })
}

// takeParked removes parked delivery id after then, in one committed and
// synced transaction, and returns it without its body.
func (s *Store) takeParked(id, what string, then func(tx *bolt.Tx, channel string, entry []byte) error) (relay.Parked, error) {
	if err := storage.ValidID("delivery", id); err != nil {
		return relay.Parked{}, err
	}
	var p relay.Parked
	err := s.update(func(tx *bolt.Tx) error {
		channel, v, err := findParked(tx, id)
		if err != nil {
			return err
		}
		p = parkedOf(channel, id, v, false)
		_, entry, ok := splitParked(v)
		if !ok {
			entry = nil
		}
		if err := then(tx, channel, entry); err != nil {
			return err
		}
		return tx.Bucket(bucketParked).Bucket([]byte(channel)).Delete([]byte(id))
	})
	if err != nil {
		return relay.Parked{}, fmt.Errorf("boltrelay: %s parked delivery %s: %w", what, id, err)
	}
	return p, nil
}

// parkedCount counts the parked deliveries of every channel.
func parkedCount(tx *bolt.Tx) (n int, err error) {
	top := tx.Bucket(bucketParked)
	err = top.ForEachBucket(func(k []byte) error {
		n += top.Bucket(k).Stats().KeyN
		return nil
	})
	return n, err
}

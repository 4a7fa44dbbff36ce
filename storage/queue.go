package storage

import (
	"encoding/json"
	"fmt"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// PutChannel creates or replaces a relay channel. It is synced even with
// NoSync: an agent must find its channel after a relay restart.
func (db *DB) PutChannel(ch Channel) error {
	if err := validID("channel", ch.ID); err != nil {
		return err
	}
	v, err := json.Marshal(ch)
	if err != nil {
		return fmt.Errorf("storage: put channel %s: %w", ch.ID, err)
	}
	err = db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChannels).Put([]byte(ch.ID), v)
	})
	if err == nil {
		err = db.sync()
	}
	if err != nil {
		return fmt.Errorf("storage: put channel %s: %w", ch.ID, err)
	}
	return nil
}

// Channel returns the relay channel id.
func (db *DB) Channel(id string) (Channel, error) {
	if validID("channel", id) != nil {
		// Channel ids come from URLs: one that could not have been
		// stored is simply not there.
		return Channel{}, devhook.Errorf(devhook.ENOTFOUND, "channel %.200q not found", id)
	}
	var ch Channel
	found := false
	err := db.bolt.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketChannels).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &ch) // copies out of the map
	})
	switch {
	case err != nil:
		return Channel{}, fmt.Errorf("storage: read channel %s: %w", id, err)
	case !found:
		return Channel{}, devhook.Errorf(devhook.ENOTFOUND, "channel %.200q not found", id)
	}
	return ch, nil
}

// Enqueue keeps d, with its body, in channel's queue until Dequeue. The
// same id twice is kept once. It returns only once the delivery is on
// disk, NoSync or not: the relay answers the sender 202 on the strength of
// it.
func (db *DB) Enqueue(channel string, d *devhook.Delivery) error {
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
	err := db.update(func(tx *bolt.Tx) error {
		q, err := tx.Bucket(bucketQueue).CreateBucketIfNotExists([]byte(channel))
		if err != nil {
			return err
		}
		if q.Get(id) != nil {
			return nil
		}
		return q.Put(id, v)
	})
	if err == nil {
		err = db.sync()
	}
	if err != nil {
		return fmt.Errorf("storage: enqueue delivery %s for channel %s: %w", d.ID, channel, err)
	}
	return nil
}

// Queued returns up to limit deliveries of channel's queue with ids after
// after ("" = from the start), in id order, bodies included. limit <= 0
// means no limit.
func (db *DB) Queued(channel string, after string, limit int) ([]*devhook.Delivery, error) {
	if err := validID("channel", channel); err != nil {
		return nil, err
	}
	var out []*devhook.Delivery
	err := db.bolt.View(func(tx *bolt.Tx) error {
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
				return fmt.Errorf("delivery %s: %w", k, err)
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
	return out, nil
}

// Dequeue removes delivery id from channel's queue. An id not in the queue
// is not an error: acknowledgements may repeat. Like Enqueue, it is synced.
func (db *DB) Dequeue(channel, id string) error {
	if err := validID("channel", channel); err != nil {
		return err
	}
	if err := validID("delivery", id); err != nil {
		return err
	}
	removed := false
	err := db.update(func(tx *bolt.Tx) error {
		removed = false
		q := tx.Bucket(bucketQueue).Bucket([]byte(channel))
		if q == nil || q.Get([]byte(id)) == nil {
			return nil
		}
		removed = true
		return q.Delete([]byte(id))
	})
	if err == nil && removed {
		err = db.sync()
	}
	if err != nil {
		return fmt.Errorf("storage: dequeue delivery %s of channel %s: %w", id, channel, err)
	}
	return nil
}

// QueueLen returns the number of deliveries in channel's queue.
func (db *DB) QueueLen(channel string) (n int, err error) {
	if err := validID("channel", channel); err != nil {
		return 0, err
	}
	err = db.bolt.View(func(tx *bolt.Tx) error {
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

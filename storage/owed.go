package storage

import (
	"encoding/json"
	"fmt"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// The owed bucket holds the retry state of the queued deliveries the agent
// owes the receiver: their forward failed, the relay was acknowledged, and
// the agent retries them until the receiver takes them or it gives up.
//
//	owed  id → devhook.RetryState as JSON
//
// The bucket is created by the first write, so a file without it is valid.
// It lives in bbolt, not in the journal: it is written once when a
// delivery becomes owed and once when that ends, never on the hot path.
// Its writes are as durable as the deliveries': not fsynced, they survive
// a killed process.
const bucketOwed = "owed"

// PutRetry records st as the retry state of delivery id, replacing any.
// The agent calls it before acknowledging an owed delivery, so that a
// restart resumes the retries.
func (db *DB) PutRetry(id string, st devhook.RetryState) error {
	if err := validID("delivery", id); err != nil {
		return err
	}
	v, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("storage: put retry state of delivery %s: %w", id, err)
	}
	if db.readOnly {
		return fmt.Errorf("storage: put retry state of delivery %s: %w", id, errReadOnly)
	}
	err = db.update(func(tx *bolt.Tx) error {
		if err := db.spaceLeft(); err != nil {
			return err
		}
		b, err := tx.CreateBucketIfNotExists([]byte(bucketOwed))
		if err != nil {
			return err
		}
		return b.Put([]byte(id), v)
	})
	if err != nil {
		return fmt.Errorf("storage: put retry state of delivery %s: %w", id, err)
	}
	return nil
}

// DeleteRetry forgets the retry state of delivery id: the receiver took it.
func (db *DB) DeleteRetry(id string) error {
	if validID("delivery", id) != nil {
		return nil
	}
	if db.readOnly {
		return fmt.Errorf("storage: delete retry state of delivery %s: %w", id, errReadOnly)
	}
	err := db.update(func(tx *bolt.Tx) error {
		if err := db.spaceLeft(); err != nil {
			return err
		}
		b := tx.Bucket([]byte(bucketOwed))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("storage: delete retry state of delivery %s: %w", id, err)
	}
	return nil
}

// Retries returns the retry state of each of ids that has one.
func (db *DB) Retries(ids []string) (map[string]devhook.RetryState, error) {
	var out map[string]devhook.RetryState
	err := db.safely(func() error {
		return db.bolt.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucketOwed))
			if b == nil {
				return nil
			}
			for _, id := range ids {
				v := b.Get([]byte(id))
				if v == nil {
					continue
				}
				var st devhook.RetryState
				if err := json.Unmarshal(v, &st); err != nil {
					return fmt.Errorf("delivery %s: %w", id, err)
				}
				if out == nil {
					out = make(map[string]devhook.RetryState)
				}
				out[id] = st
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("storage: read retry states: %w", err)
	}
	return out, nil
}

// AllRetries returns every retry state, in the order of the delivery ids.
// A state may outlive its delivery when retention removed it: Delivery
// then says not found, and the agent deletes the state.
func (db *DB) AllRetries() (ids []string, states []devhook.RetryState, err error) {
	err = db.safely(func() error {
		return db.bolt.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucketOwed))
			if b == nil {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				var st devhook.RetryState
				if err := json.Unmarshal(v, &st); err != nil {
					return fmt.Errorf("delivery %s: %w", k, err)
				}
				ids = append(ids, string(k))
				states = append(states, st)
				return nil
			})
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("storage: read retry states: %w", err)
	}
	return ids, states, nil
}

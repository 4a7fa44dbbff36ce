package storage

import (
	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// PutDeliveriesTx records ds in one transaction, for building large stores
// in tests and benchmarks quickly. It does not prune.
func (db *DB) PutDeliveriesTx(ds []*devhook.Delivery) error {
	es := make([]*encodedDelivery, len(ds))
	for i, d := range ds {
		es[i] = encodeDelivery(d)
	}
	return db.bolt.Update(func(tx *bolt.Tx) error {
		for _, e := range es {
			if _, err := e.put(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

// BucketLens returns the number of keys in each top-level bucket that
// holds per-delivery or per-channel records.
func (db *DB) BucketLens() map[string]int {
	m := map[string]int{}
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if string(name) == "meta" {
				continue
			}
			m[string(name)] = tx.Bucket(name).Stats().KeyN
		}
		return nil
	})
	return m
}

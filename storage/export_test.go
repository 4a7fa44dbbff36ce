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
	if err := db.settle(); err != nil {
		return err
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
	_ = db.settle()
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

// EncodeRecords returns the stored encodings of d (meta, queued, summary)
// and of a.
func EncodeRecords(d *devhook.Delivery, a devhook.Attempt) [][]byte {
	s := d.Summarize()
	return [][]byte{appendMeta(nil, d, false), appendMeta(nil, d, true), appendSummary(nil, &s), appendAttempt(nil, &a)}
}

// DecodeRecords decodes b as every kind of record and returns their
// errors: meta, summary, filter match, attempt.
func DecodeRecords(b []byte) []error {
	_, e1 := decodeMeta(b)
	_, e2 := decodeSummary(b)
	_, e3 := matchSummary(b, &devhook.Filter{Verdict: "ok", RunID: "r"})
	_, e4 := decodeAttempt(b)
	return []error{e1, e2, e3, e4}
}

package storage

import (
	"errors"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Group commit. Writes that arrive while a transaction is committing wait,
// and the next transaction commits all of them at once: one fsync (or one
// round of page writes without fsync) for many writes. The relay's store
// (boltrelay, through GroupCommit) and the agent's owed states use it. A
// write that finds no commit in flight starts one at once, so a single
// writer never waits for a timer, as it would with bolt's Batch and its
// MaxBatchDelay.
//
// There is no goroutine: the caller that finds the store idle leads. It
// commits the pending writes, its own among them, then hands the lead to
// the oldest write still waiting and returns, so that no caller commits
// for others indefinitely.

// maxGroup bounds the writes committed in one transaction.
const maxGroup = 1000

type group struct {
	mu      sync.Mutex
	pending []*call
	leading bool // a caller is committing or about to
}

type call struct {
	fn   func(*bolt.Tx) error
	done chan error // the result; errLead hands the lead over
}

var errLead = errors.New("lead the next group commit")

// update runs fn in a write transaction of b, possibly shared with
// concurrent writes. fn may run more than once (when another write of its
// group fails, the group is retried without it), so it must set its
// results afresh on each run. fn's error fails only its own write.
func (g *group) update(b *bolt.DB, fn func(*bolt.Tx) error) error {
	c := &call{fn: fn, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if !lead {
		if err := <-c.done; err != errLead {
			return err
		}
	}

	g.mu.Lock()
	n := min(len(g.pending), maxGroup)
	calls := append([]*call(nil), g.pending[:n]...)
	g.pending = append(g.pending[:0], g.pending[n:]...)
	g.mu.Unlock()

	commit(b, calls)

	g.mu.Lock()
	if len(g.pending) > 0 {
		next := g.pending[0]
		g.mu.Unlock()
		next.done <- errLead
	} else {
		g.leading = false
		g.mu.Unlock()
	}
	return <-c.done
}

// commit runs calls in one transaction and sends each its result. A call
// that fails is taken out, the others retried, and the failed one then run
// alone so that it gets its own error.
func commit(b *bolt.DB, calls []*call) {
	var solo []*call
	for len(calls) > 0 {
		failed := -1
		err := b.Update(func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := safeCall(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 && len(calls) > 1 {
			solo = append(solo, calls[failed])
			calls = append(calls[:failed:failed], calls[failed+1:]...)
			continue
		}
		for _, c := range calls {
			c.done <- err
		}
		break
	}
	for _, c := range solo {
		c.done <- b.Update(func(tx *bolt.Tx) error { return safeCall(c.fn, tx) })
	}
}

// safeCall turns a panic in fn into an error, so that one write cannot
// leave the others of its group waiting forever.
func safeCall(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("storage: panic in a write: %v", r)
		}
	}()
	return fn(tx)
}

// update runs fn in a write transaction of the store's file, possibly
// shared with concurrent writes; see group.update.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	return db.safely(func() error { return db.group.update(db.bolt, fn) })
}

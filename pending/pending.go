// Package pending holds the small writes of a command's start that wait
// for room: listen.json, channels.json, webhooks.json. A full disk under
// the data directory must not stop listen (its deliveries wait in the
// relay's queue, its history stays readable), so such a write that fails
// for want of room (ENOSPC, EDQUOT) is kept and tried again, with
// backoff, until it succeeds.
//
//	w := pending.New(pending.Config{Logf: logf})
//	g.Go("the writes waiting for room", w.Run, nil)
//	err := w.Do(path, "listen.json", func() error { return write(...) })
//
// Writes are known by a key (a file, or an entry of one): a later Do of
// the same key replaces a write still waiting, whatever it does, so that
// what is written last is what was asked last (a removal at exit after a
// write that never happened writes nothing). Do and the retries run one
// at a time, so a write never overlaps another.
//
// What the user reads: each write kept is said once, with the error;
// each one written later is said once, with how long it waited; one that
// was never written is said when Run ends.
package pending

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Config configures Writes. Zero values mean defaults.
type Config struct {
	// Logf says what is kept and what is written later; nil: nothing.
	Logf func(format string, args ...any)
	// MinBackoff and MaxBackoff bound the wait between two tries: it
	// doubles from the first to the second, with jitter (half to one and
	// a half times), and starts again from MinBackoff once nothing waits.
	MinBackoff, MaxBackoff time.Duration
	Now                    func() time.Time
	// Rand returns a number in [0, n), for jitter; nil: math/rand/v2.
	Rand func(n int64) int64
}

// NoRoom reports whether err is a write refused for want of room: a full
// file system (ENOSPC) or a quota (EDQUOT).
func NoRoom(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Writes is the writes waiting for room. Its methods may be called from
// many goroutines.
type Writes struct {
	cfg  Config
	kick chan struct{} // a write was kept

	mu      sync.Mutex // held while a write runs
	waiting map[string]*write
}

// write is one write waiting for room.
type write struct {
	name  string // for the user: the file
	fn    func() error
	since time.Time
	err   string // the last error's cause (cause), said when it changes
}

// cause is what two failures of a write are compared by: the system's
// error when there is one (ENOSPC), else the text. The text itself may
// name a temporary file, new at each try, which is no new cause.
func cause(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// New returns Writes with nothing waiting.
func New(cfg Config) *Writes {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Int64N
	}
	return &Writes{cfg: cfg, kick: make(chan struct{}, 1), waiting: map[string]*write{}}
}

// Do runs fn, the write of key (name says what it writes, for the user),
// replacing a write of key still waiting. When fn fails for want of room
// (NoRoom), the write is kept, said once, and tried again by Run until
// it succeeds: Do returns nil. Any other error is returned.
func (w *Writes) Do(key, name string, fn func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiting, key)
	err := fn()
	if err == nil || !NoRoom(err) {
		return err
	}
	w.waiting[key] = &write{name: name, fn: fn, since: w.cfg.Now(), err: cause(err)}
	w.cfg.Logf("cannot write %s (%v); going on without it, and writing it once there is room", name, err)
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

// Waiting returns the names of the writes waiting for room, in order.
func (w *Writes) Waiting() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for _, wr := range w.waiting {
		names = append(names, wr.name)
	}
	sort.Strings(names)
	return names
}

// Run tries the writes waiting again, with backoff, until ctx ends; then
// it says which were never written. It returns nil.
func (w *Writes) Run(ctx context.Context) error {
	backoff := w.cfg.MinBackoff
	for {
		if len(w.Waiting()) == 0 {
			backoff = w.cfg.MinBackoff
			select {
			case <-ctx.Done():
				return nil
			case <-w.kick:
				continue
			}
		}
		t := time.NewTimer(w.jitter(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			if names := w.Waiting(); len(names) > 0 {
				w.cfg.Logf("never written, for want of room: %s", inWords(names))
			}
			return nil
		case <-t.C:
		}
		w.retry()
		backoff = min(2*backoff, w.cfg.MaxBackoff)
	}
}

// inWords says names as a list in words: "a", "a and b", "a, b and c".
func inWords(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// retry tries every write waiting once.
func (w *Writes) retry() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, wr := range w.waiting {
		err := wr.fn()
		switch {
		case err == nil:
			delete(w.waiting, key)
			w.cfg.Logf("wrote %s, which waited %s for room", wr.name, w.cfg.Now().Sub(wr.since).Round(time.Second))
		case cause(err) != wr.err:
			wr.err = cause(err)
			w.cfg.Logf("cannot write %s yet (%v); trying again", wr.name, err)
		}
	}
}

// jitter returns a random wait between d/2 and 3d/2.
func (w *Writes) jitter(d time.Duration) time.Duration {
	return time.Duration(w.cfg.Rand(int64(d))) + d/2
}

package agent

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The writes held at the store's gate probe in turn: one that fits is
// made although the first one held never fits (a large body, and the
// disk got a little room back), and the one that never fits goes on
// waiting, probed at the gate's pace. A write whose wait ends (its
// connection) leaves the line without holding up the others.
func TestStoreGate_EveryHeldWriteProbesInTurn(t *testing.T) {
	a, err := New(Config{Store: struct{ Store }{}, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	errFull := errors.New("no space left on device")
	stop := make(chan struct{})
	var large atomic.Int64
	largeDone := make(chan bool, 1)
	go func() { largeDone <- a.untilWritten(stop, func() error { large.Add(1); return errFull }) }()
	waitFor(t, "the large write probed", func() bool { return large.Load() > 0 })

	gone := make(chan struct{})
	goneDone := make(chan bool, 1)
	go func() { goneDone <- a.untilWritten(gone, func() error { return errFull }) }()
	close(gone) // its connection ended: it leaves, whether it had the turn or not
	if <-goneDone {
		t.Fatal("a write whose connection ended was said to be made")
	}

	smallDone := make(chan bool, 1)
	go func() { smallDone <- a.untilWritten(stop, func() error { return nil }) }()
	select {
	case ok := <-smallDone:
		if !ok {
			t.Fatal("the small write was not made")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("a write that fits still waits after %d probes of one that does not", large.Load())
	}
	close(stop)
	if <-largeDone {
		t.Fatal("the large write was said to be made")
	}
	a.gate.mu.Lock()
	defer a.gate.mu.Unlock()
	if g := &a.gate; g.waiting != 0 || g.probing || len(g.line) != 0 || g.wait != 0 {
		t.Errorf("gate after every write left: %d waiting, probing %v, line %d, wait %s", g.waiting, g.probing, len(g.line), g.wait)
	}
}

package natsrelay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook/natsrelay"
)

// While NATS is away, the watch of the agents bucket fails its heartbeat
// again and again ("consumer not active", every 10 s): the relay's log
// says it once, then once more when NATS is back, with the count.
func TestConnLogSaysARepeatedErrorOnce(t *testing.T) {
	natsd, ns := startRestartable(t)
	log := &logBook{t: t}
	cl := &natsrelay.ConnLog{Logf: log.Logf}
	nc, err := nats.Connect(ns.ClientURL(), append(natsrelay.ReconnectOptions(), cl.Options()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r, err := natsrelay.OpenRouter(context.Background(), natsrelay.Config{Conn: nc, Logf: log.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	natsd.stop()
	const failure = "consumer not active"
	waitFor(t, "the watch's heartbeat failing twice", 90*time.Second, func() bool { return cl.Seen(failure) >= 2 })
	if got := log.with(failure); len(got) != 1 {
		t.Fatalf("while NATS is away, the log says %q %d times, want once: %q", failure, len(got), got)
	}
	natsd.restart()
	waitFor(t, "the count logged when NATS is back", 60*time.Second, func() bool { return len(log.with(failure)) >= 2 })
	got := log.with(failure)
	if len(got) != 2 || !strings.Contains(got[1], "times in") || len(log.with("connection back")) != 1 {
		t.Fatalf("after NATS is back, the log says %q", got)
	}
}

// asyncErr is the error handler cl gives nats.go, called as nats.go calls
// it: the errors below come from a connection that holds, which a NATS
// server cannot be made to give on cue (JetStream without its quorum
// behind a connection that holds; a subscription NATS refuses).
func asyncErr(cl *natsrelay.ConnLog) func(error) {
	var o nats.Options
	for _, opt := range cl.Options() {
		if err := opt(&o); err != nil {
			panic(err)
		}
	}
	return func(err error) { o.AsyncErrorCB(nil, nil, err) }
}

// An error that keeps coming while the connection holds (JetStream
// without its quorum: the watch's "consumer not active" every 10 s, with
// no loss of the connection to end it) is said again with its count,
// once an interval, not only at its first: before, one line said it and
// nothing after, however long it lasted.
func TestConnLogSaysAnErrorThatLastsAgainWithItsCount(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	log := &logBook{t: t}
	cl := &natsrelay.ConnLog{Logf: log.Logf, Now: func() time.Time { return now }}
	fail := asyncErr(cl)
	const failure = "nats: consumer not active"
	for range 6 * 60 { // an hour, every 10 s
		fail(errors.New(failure))
		now = now.Add(10 * time.Second)
	}
	got := log.with(failure)
	if len(got) < 2 || len(got) > 1+60/10 {
		t.Fatalf("an error coming every 10 s for an hour, the connection holding, is said %d times, want once and then its count every 10 minutes or so: %q", len(got), got)
	}
	for _, l := range got[1:] {
		if !strings.Contains(l, "times in") {
			t.Fatalf("said again without its count: %q", got)
		}
	}
}

// The errors counted are bounded: a text that differs each time (a
// subscription NATS refuses names its subject, one per channel) is not
// kept without end, nor said each time.
func TestConnLogKeepsBoundedErrors(t *testing.T) {
	log := &logBook{t: t}
	cl := &natsrelay.ConnLog{Logf: log.Logf}
	fail := asyncErr(cl)
	const n = 10_000
	for i := range n {
		fail(fmt.Errorf("nats: permissions violation for subscription to %q", fmt.Sprintf("devhook.agent.ch%d.>", i)))
	}
	if got := len(log.with("permissions violation")); got > 100 {
		t.Fatalf("%d different errors are said in %d lines", n, got)
	}
	if kept := cl.Kept(); kept > 100 {
		t.Fatalf("%d different errors are kept, %d of them", n, kept)
	}
	if seen := cl.Seen(""); seen != n {
		t.Fatalf("counted %d errors, want %d", seen, n)
	}
}

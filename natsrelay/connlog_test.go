package natsrelay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook/natsrelay"
)

// lines keeps log lines.
type lines struct {
	t  *testing.T
	mu sync.Mutex
	l  []string
}

func (b *lines) Logf(format string, args ...any) {
	b.t.Logf(format, args...)
	b.mu.Lock()
	b.l = append(b.l, fmtLine(format, args...))
	b.mu.Unlock()
}

// with returns the lines that hold part.
func (b *lines) with(part string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range b.l {
		if strings.Contains(l, part) {
			out = append(out, l)
		}
	}
	return out
}

// While NATS is away, the watch of the agents bucket fails its heartbeat
// again and again ("consumer not active", every 10 s): the relay's log
// says it once, then once more when NATS is back, with the count.
func TestConnLogSaysARepeatedErrorOnce(t *testing.T) {
	natsd, ns := startRestartable(t)
	log := &lines{t: t}
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

func fmtLine(format string, args ...any) string { return fmt.Sprintf(format, args...) }

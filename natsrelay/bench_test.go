package natsrelay_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/wire"
)

// echo is an agent that answers every delivery with its body at once.
type echo struct{}

func (echo) Deliver(_ context.Context, d *devhook.Delivery) (*wire.Answer, error) {
	return &wire.Answer{Status: http.StatusOK, Header: http.Header{"A": {"1"}}, Body: d.Body}, nil
}
func (echo) Kick()    {}
func (echo) Replace() {}

func benchConfig(b *testing.B, ns interface{ ClientURL() string }) natsrelay.Config {
	b.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return natsrelay.Config{Conn: nc, ResponseTimeout: 10 * time.Second}
}

func benchDelivery(channel string, n int) *devhook.Delivery {
	return &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: channel, Method: "POST", Path: "/x",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: make([]byte, n), ReceivedAt: time.Now().UTC()}
}

// A live delivery through the Router of one instance to the agent on
// another and its answer back, the agent answering at once: what the
// cluster adds to a delivery that crosses instances. On a NATS server at
// its defaults (max_payload 1 MiB), 10 MiB go in parts both ways.
func BenchmarkDeliverToAnotherInstance(b *testing.B) {
	ns := natstest.Run(b)
	open := func() *natsrelay.Router {
		r, err := natsrelay.OpenRouter(context.Background(), benchConfig(b, ns))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		return r
	}
	agents, senders := open(), open()
	const channel = "0123456789abcdef0123456789abcdef"
	agents.Attach(channel, echo{})
	for _, n := range []int{1 << 10, 10 << 20} {
		b.Run(fmt.Sprintf("body=%d", n), func(b *testing.B) {
			d := benchDelivery(channel, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				a, err := senders.Deliver(context.Background(), d)
				if err != nil || len(a.Body) != n {
					b.Fatalf("%v", err)
				}
			}
		})
	}
}

// A delivery queued, read back and dequeued.
func BenchmarkQueueRoundTrip(b *testing.B) {
	ns := natstest.Run(b)
	s, err := natsrelay.OpenStore(context.Background(), benchConfig(b, ns))
	if err != nil {
		b.Fatal(err)
	}
	const channel = "0123456789abcdef0123456789abcdef"
	for _, n := range []int{1 << 10, 10 << 20} {
		b.Run(fmt.Sprintf("body=%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				d := benchDelivery(channel, n)
				if err := s.Enqueue(channel, d); err != nil {
					b.Fatal(err)
				}
				got, err := s.Queued(channel, "", 1)
				if err != nil || len(got) != 1 || len(got[0].Body) != n {
					b.Fatalf("%d %v", len(got), err)
				}
				if err := s.Dequeue(channel, d.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

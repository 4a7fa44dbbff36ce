package natsrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/storetest"
)

// The shared suite of relay stores: quotas, expiry, idle channels, a full
// disk, against JetStream on a real NATS server.
func TestStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Store {
		ns := natstest.Run(t)
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s, err := natsrelay.OpenStore(context.Background(), natsrelay.Config{
			Conn: nc, Quota: cfg.Quota, WriteError: cfg.WriteError, Timeout: 5 * time.Second, Logf: t.Logf,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

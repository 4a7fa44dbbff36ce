package storage_test

import (
	"path/filepath"
	"testing"

	"github.com/devhook/devhook/relay/storetest"
	"github.com/devhook/devhook/storage"
)

// The shared suite of relay stores: quotas, expiry, idle channels, a full
// disk, against relay.db.
func TestRelayStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Store {
		s, err := storage.OpenRelayStore(filepath.Join(t.TempDir(), "relay.db"), storage.RelayStoreConfig{
			Quota: cfg.Quota, WriteError: cfg.WriteError,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

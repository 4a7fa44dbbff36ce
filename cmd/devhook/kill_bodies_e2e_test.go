package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

// A devhook listen killed with SIGKILL while deliveries of 2 to 8 KB
// (bodies kept in body files, not in bbolt) are still arriving loses no
// delivery it answered, and reads back each one's body byte for byte: the
// kill falls anywhere, between a batch's bodies written and bbolt's
// commit included.
func TestListen_KilledUnderLoadKeepsLargeBodies(t *testing.T) {
	dir := t.TempDir()
	const secret = "whsec_killbodies"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()

	data := filepath.Join(dir, "data")
	listen := startProc(t, "listen", "--json", "--forward", recv.URL, "--secret", secret,
		"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
	publicURL, _ := listen.nextJSON(t, "ready")["public_url"].(string)
	if publicURL == "" {
		t.Fatalf("no public_url in the ready line; stderr: %s", listen.stderr)
	}

	// Senders go on until the kill; the kill comes once enough were
	// answered, with requests still in flight.
	const senders, killAfter = 8, 400
	var answered atomic.Int64
	enough := make(chan struct{})
	var enoughOnce sync.Once
	var mu sync.Mutex
	sent := map[string][]byte{} // run id → body, of the answered deliveries
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 60 * time.Second}
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			for k := 0; ; k++ {
				run := fmt.Sprintf("run-%d-%d", s, k)
				st := devhook.NewRunStatus(run, "app", "running", time.Now())
				pad := strings.Repeat(string(rune('a'+rng.IntN(26))), 2048+rng.IntN(6*1024))
				body, _ := json.Marshal(struct {
					devhook.RunStatus
					Padding string `json:"padding"`
				}{st, pad})
				req, _ := http.NewRequest(http.MethodPost, publicURL+"/hook", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
				resp, err := client.Do(req)
				if err != nil {
					return // killed
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return // killed while answering, or refused: not acknowledged
				}
				mu.Lock()
				sent[run] = body
				mu.Unlock()
				if answered.Add(1) >= killAfter {
					enoughOnce.Do(func() { close(enough) })
				}
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(5 * time.Minute):
		t.Fatalf("fewer than %d deliveries answered in 5 minutes; stderr: %s", killAfter, listen.stderr)
	}
	listen.kill() // SIGKILL
	wg.Wait()

	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if files, _ := filepath.Glob(filepath.Join(data, "deliveries.db.bodies", "*")); len(files) == 0 {
		t.Fatalf("no body file: the bodies of %d to %d bytes were not kept in body files", 2048, 8192)
	}
	for run, body := range sent {
		got, err := db.RunDeliveries(run)
		if err != nil || len(got) != 1 {
			t.Fatalf("run %s after SIGKILL: %+v, %v; want its one delivery", run, got, err)
		}
		d, err := db.Delivery(got[0].ID)
		if err != nil {
			t.Fatalf("run %s after SIGKILL: delivery %s: %v", run, got[0].ID, err)
		}
		if !bytes.Equal(d.Body, body) {
			t.Fatalf("run %s after SIGKILL: body of %d bytes read back as %d bytes differing", run, len(body), len(d.Body))
		}
	}
	if dmg := db.Damage(); dmg.Damaged > 0 {
		t.Fatalf("after SIGKILL: %+v", dmg)
	}
	t.Logf("%d deliveries answered before the kill, each read back whole", len(sent))
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// closedAddr returns a loopback address nothing listens on, for --inspect:
// the history commands then read the store themselves.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// runDevhook runs the devhook binary to its end and returns its stdout,
// stderr and exit error.
func runDevhook(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(devhookBinary(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("devhook %s died of %v; stderr: %s", strings.Join(args, " "), ee.Sys().(syscall.WaitStatus).Signal(), e.String())
	}
	if strings.Contains(e.String(), "SIGSEGV") || strings.Contains(e.String(), "panic:") || strings.Contains(e.String(), "fatal error") {
		t.Fatalf("devhook %s crashed; stderr: %s", strings.Join(args, " "), e.String())
	}
	return o.String(), e.String(), err
}

// killedUnderLoad runs devhook listen with data directory data, sends it
// deliveries from several senders, and SIGKILLs it once at least n were
// answered, senders still sending, so that its journal holds records. It
// returns the run ids of the deliveries answered 200.
func killedUnderLoad(t *testing.T, data string, n int) []string {
	t.Helper()
	const secret = "whsec_storage"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	p := startProc(t, "listen", "--json", "--forward", recv.URL, "--secret", secret,
		"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
	pub, _ := p.nextJSON(t, "ready")["public_url"].(string)
	if pub == "" {
		t.Fatal("no public_url in the ready line")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var (
		mu       sync.Mutex
		answered []string
		count    atomic.Int64
		stop     = make(chan struct{})
		stopOnce sync.Once
		wg       sync.WaitGroup
	)
	for s := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				run := fmt.Sprintf("run-%d-%d", s, k)
				body, _ := json.Marshal(devhook.NewRunStatus(run, "app", "running", time.Now()))
				req, _ := http.NewRequest(http.MethodPost, pub+"/hook", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
				resp, err := client.Do(req)
				if err != nil {
					return // killed
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					continue
				}
				mu.Lock()
				answered = append(answered, run)
				mu.Unlock()
				if count.Add(1) >= int64(n) {
					stopOnce.Do(func() {
						p.kill()
						close(stop)
					})
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return answered
}

// A journal damaged in the middle after a SIGKILL: deliveries list shows
// every delivery whose records are intact and says the journal is
// damaged, without writing anything: a second run shows the same.
func TestDeliveries_DamagedJournal(t *testing.T) {
	var data, path string
	var journal []byte
	var answered []string
	// A header (16 bytes) and at least one record; under load it usually
	// holds tens of them, but a kill just after a flush finds both files
	// empty: then kill another listen under load.
	for try := 0; len(journal) < 64; try++ {
		if try == 5 {
			t.Fatalf("the journal held %d bytes at each of %d kills, want records to damage", len(journal), try)
		}
		data = filepath.Join(t.TempDir(), "data")
		answered = killedUnderLoad(t, data, 300)
		// Flip a byte in the middle of the larger journal file.
		for _, name := range []string{"deliveries.db.journal0", "deliveries.db.journal1"} {
			b, err := os.ReadFile(filepath.Join(data, name))
			if err == nil && len(b) > len(journal) {
				path, journal = filepath.Join(data, name), b
			}
		}
	}
	t.Logf("damaging %s, %d bytes", filepath.Base(path), len(journal))
	damaged := bytes.Clone(journal)
	damaged[16+(len(damaged)-16)/2] ^= 0x20
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}

	inspect := closedAddr(t)
	out, stderr, err := runDevhook(t, "deliveries", "list", "--json", "--limit", "1000", "--data", data, "--inspect", inspect)
	if err != nil {
		t.Fatalf("deliveries list: %v; stderr: %s", err, stderr)
	}
	var listed []devhook.Summary
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("deliveries list --json: %v: %s", err, out)
	}
	runs := map[string]bool{}
	for _, s := range listed {
		runs[s.Event.RunID] = true
	}
	missing := 0
	for _, run := range answered {
		if !runs[run] {
			missing++
		}
	}
	// One damaged record loses at most its own delivery.
	if missing > 1 {
		t.Errorf("%d of the %d answered deliveries are missing after one damaged byte; want at most 1", missing, len(answered))
	}
	// A read-only command: it shows what the journal holds, says it is
	// damaged, and leaves it for devhook listen to apply and set aside.
	if asides, _ := filepath.Glob(path + ".damaged-*"); len(asides) != 0 {
		t.Errorf("deliveries list set aside %v; it must not write", asides)
	}
	if kept, _ := os.ReadFile(path); !bytes.Equal(kept, damaged) {
		t.Errorf("deliveries list changed the damaged journal")
	}
	if !strings.Contains(stderr, "is damaged") || !strings.Contains(stderr, path) || !strings.Contains(stderr, "devhook listen applies them") {
		t.Errorf("stderr %q does not report the damaged journal and what happens to it", stderr)
	}

	out2, stderr2, err := runDevhook(t, "deliveries", "list", "--json", "--limit", "1000", "--data", data, "--inspect", inspect)
	if err != nil || !strings.Contains(stderr2, "is damaged") {
		t.Fatalf("second deliveries list: %v; stderr: %q", err, stderr2)
	}
	if out2 != out {
		t.Errorf("the second list differs from the first")
	}
}

// A deliveries.db cut short, or empty, makes deliveries list fail with the
// message that says to move it away, not a crash, and leaves it as it was.
func TestDeliveries_DamagedStore(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	killedUnderLoad(t, data, 50)
	// Apply the journal and close cleanly first.
	if _, stderr, err := runDevhook(t, "deliveries", "list", "--data", data, "--inspect", closedAddr(t)); err != nil {
		t.Fatalf("deliveries list: %v; stderr: %s", err, stderr)
	}
	dbPath := filepath.Join(data, "deliveries.db")
	whole, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 8 << 10, 16 << 10, 32 << 10, 64 << 10} {
		if n >= len(whole) {
			continue
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if err := os.WriteFile(dbPath, whole[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := runDevhook(t, "deliveries", "list", "--data", data, "--inspect", closedAddr(t))
			if err == nil {
				t.Fatalf("deliveries list succeeded on the first %d bytes of the store", n)
			}
			if !strings.Contains(stderr, "move it away") || !strings.Contains(stderr, dbPath) {
				t.Errorf("stderr %q does not say to move %s away", stderr, dbPath)
			}
			if got, _ := os.ReadFile(dbPath); !bytes.Equal(got, whole[:n]) {
				t.Errorf("devhook changed the damaged store")
			}
		})
	}
}

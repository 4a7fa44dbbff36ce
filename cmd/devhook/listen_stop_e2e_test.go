package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

// Issue 36: Ctrl-C stops listen's parts in reverse order, as a failing
// part does: the announcement deletes the webhook at the service while
// the agent is still connected. The service here is the emulator, behind
// a handler that, while the DELETE of the webhook waits, sends deliveries
// through listen's public URL: each reaches the receiver (200), none is
// queued for want of an agent (202).
func TestListen_CtrlCDeletesTheWebhookWhileConnected(t *testing.T) {
	bin := devhookBinary(t)
	t.Setenv("HOME", t.TempDir())
	for _, k := range []string{cloud.EnvAPIKey, cloud.EnvEndpoint, cloud.EnvProfile, cloud.EnvSystemCerts} {
		t.Setenv(k, "")
	}
	e, err := emulator.New(emulator.Config{APIKeys: []string{svcKey}, Teams: []emulator.Team{svcTeam}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var (
		mu      sync.Mutex
		public  string
		during  []int // what senders got while the DELETE waited
		deleted = make(chan struct{})
	)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/webhooks/") {
			mu.Lock()
			u := public
			mu.Unlock()
			for i := range 5 {
				st, _, _ := post(t, u+"/hook", fmt.Appendf(nil, `{"during_delete":%d}`, i))
				mu.Lock()
				during = append(during, st)
				mu.Unlock()
			}
			defer close(deleted)
		}
		e.ServeHTTP(w, r)
	}))
	defer svc.Close()
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()

	l := startCmd(t, bin, "listen", "--json", "--register", "--forward", rs.URL, "--data", t.TempDir(),
		"--relay-addr", "127.0.0.1:0", "--inspect", "off", "--endpoint", svc.URL, "--api-key", svcKey)
	ready := l.nextJSON(t, "ready")
	mu.Lock()
	public, _ = ready["public_url"].(string)
	mu.Unlock()
	if st, _, b := post(t, public+"/hook", []byte(`{"before":1}`)); st != http.StatusOK {
		t.Fatalf("delivery before Ctrl-C: %d %s", st, b)
	}

	l.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-deleted:
	case <-time.After(30 * time.Second):
		t.Fatalf("listen did not delete its webhook within 30s of SIGINT; stderr: %s", l.stderr)
	}
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("listen did not stop within 30s of SIGINT; stderr: %s", l.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, st := range during {
		if st != http.StatusOK {
			t.Errorf("delivery %d sent while the webhook was being deleted got %d, want 200 from the receiver: the agent had stopped first (all: %v)", i, st, during)
			break
		}
	}
	if n := recv.total(); n != 1+len(during) {
		t.Errorf("the receiver got %d deliveries, want %d", n, 1+len(during))
	}
}

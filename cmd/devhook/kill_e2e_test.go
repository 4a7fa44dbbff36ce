package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

// A devhook listen killed with SIGKILL right after answering loses no
// delivery it answered: each was recorded with its attempt before the
// answer (most of them still in the journal, not yet in bbolt), and the
// next open of the store has them all.
func TestListen_KilledLosesNothing(t *testing.T) {
	bin := devhookBinary(t)
	dir := t.TempDir()
	const secret = "whsec_kill"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()

	data := filepath.Join(dir, "data")
	listen := exec.Command(bin, "listen", "--json", "--forward", recv.URL, "--secret", secret,
		"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
	stdout, err := listen.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	listen.Stderr = &stderr
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			listen.Process.Kill()
			listen.Wait()
		}
	}()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatalf("no ready line; stderr: %s", stderr.String())
	}
	var ready struct {
		PublicURL string `json:"public_url"`
	}
	if err := json.Unmarshal(sc.Bytes(), &ready); err != nil || ready.PublicURL == "" {
		t.Fatalf("ready line %q: %v", sc.Text(), err)
	}
	go func() {
		for sc.Scan() { // keep the pipe drained
		}
	}()

	const senders, each = 8, 40
	var mu sync.Mutex
	var runs []string
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				run := fmt.Sprintf("run-%d-%d", s, k)
				body, _ := json.Marshal(devhook.NewRunStatus(run, "app", "running", time.Now()))
				req, _ := http.NewRequest(http.MethodPost, ready.PublicURL+"/hook", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %s", run, resp.Status)
					return
				}
				mu.Lock()
				runs = append(runs, run)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	killed = true
	if err := listen.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	listen.Wait()
	if t.Failed() {
		return
	}

	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := db.Count(); err != nil || n != senders*each {
		t.Fatalf("after SIGKILL: %d deliveries recorded (%v), want %d", n, err, senders*each)
	}
	for _, run := range runs {
		got, err := db.RunDeliveries(run)
		if err != nil || len(got) != 1 || got[0].Attempts != 1 || got[0].Status != http.StatusOK {
			t.Fatalf("run %s after SIGKILL: %+v, %v; want one delivery answered 200", run, got, err)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/internal/fulldisk"
	"github.com/devhook/devhook/storage"
)

// runToExit runs the devhook binary with args until it exits by itself
// (a start that fails), and returns its exit status and outputs.
func runToExit(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failed start, not a bet on speed
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("devhook %s did not exit within 60s; stdout: %s; stderr: %s", strings.Join(args, " "), out.String(), errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// A relay whose start fails (a port in use, its --metrics-addr's too)
// exits 1 with what to change, and says nothing of serving: it used to
// print "devhook relay on …" before it found --metrics-addr taken.
func TestRelay_FailedStartSaysNothingOfServing(t *testing.T) {
	bin := devhookBinary(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tt := range []struct {
		name, flag string
		args       []string
	}{
		{"--addr in use", "--addr", []string{"--addr", taken.Addr().String()}},
		{"--metrics-addr in use", "--metrics-addr", []string{"--addr", "127.0.0.1:0", "--metrics-addr", taken.Addr().String()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runToExit(t, bin, append([]string{"relay", "serve", "--data", t.TempDir()}, tt.args...)...)
			if code != 1 || !strings.Contains(stderr, "choose another with "+tt.flag) {
				t.Errorf("exit status %d, stderr %q; want 1 and what to change (%s)", code, stderr, tt.flag)
			}
			if strings.Contains(stdout, "devhook relay on") {
				t.Errorf("a relay that did not start said where it serves:\n%s", stdout)
			}
		})
	}
}

// A first start of a relay on a really full disk (relay serve's --data,
// and listen's built-in relay beside a delivery store made before) exits
// 1 saying to free some space, leaves no relay.db behind, and says
// nothing of serving.
func TestRelay_FirstStartOnAReallyFullDisk(t *testing.T) {
	bin := devhookBinary(t)
	disk := fulldisk.Mount(t, "4m")
	db, err := storage.Open(filepath.Join(disk.Dir, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	disk.Fill()
	for _, tt := range []struct {
		name, said string
		args       []string
	}{
		{"relay serve", "devhook relay on", []string{"relay", "serve", "--addr", "127.0.0.1:0", "--data", disk.Dir}},
		{"listen's built-in relay", "devhook is", []string{"listen", "--relay-addr", "127.0.0.1:0", "--inspect", "off", "--forward", "127.0.0.1:9", "--data", disk.Dir}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runToExit(t, bin, tt.args...)
			if code != 1 || !strings.Contains(stderr, "no space left on device; free some space in "+disk.Dir+" and start again") {
				t.Errorf("exit status %d, stderr %q; want 1 and to free some space", code, stderr)
			}
			if strings.Contains(stdout, tt.said) {
				t.Errorf("a start that failed said it serves:\n%s", stdout)
			}
			if _, err := os.Stat(filepath.Join(disk.Dir, "relay.db")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("relay.db after a failed first start: %v", err)
			}
		})
	}
}

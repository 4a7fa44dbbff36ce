package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/storage"
)

// freeAddr is a loopback address no one listens on now, for a listen
// whose inspector a test must reach before the ready line says where.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A replay asked for through the inspector the moment it takes requests
// publishes its change to the inspector while listen is still wiring its
// parts: under -race, listen must have finished with the inspector before
// it serves.
func TestListen_ReplayAtStartIsNoRace(t *testing.T) {
	recv := httptest.NewServer(receiver.New(receiver.Config{}))
	defer recv.Close()
	data := t.TempDir()

	lr := startListen(t, "--forward", recv.URL, "--data", data)
	pub, _ := lr.next(t, "ready")["public_url"].(string)
	resp, err := http.Post(pub+"/hook", "application/json", strings.NewReader(`{"event":"run.status"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id, _ := lr.next(t, "delivery")["id"].(string)
	lr.stop(t)

	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	replayed := make(chan error, 1)
	go func() { // replays from the first moment the inspector answers
		c := &inspector.Client{BaseURL: "http://" + addr, HTTP: &http.Client{Timeout: 10 * time.Second}}
		for {
			_, err := c.Replay(ctx, id, devhook.ReplayOptions{})
			if err == nil || ctx.Err() != nil {
				replayed <- err
				return
			}
		}
	}()
	lr2 := startListen(t, "--forward", recv.URL, "--data", data, "--inspect", addr)
	if err := <-replayed; err != nil {
		t.Fatalf("replay through the inspector at start: %v", err)
	}
	lr2.next(t, "replay")
	lr2.stop(t)
}

// closeFails is the real delivery store, whose Close (the final flush)
// fails after it closed the file.
type closeFails struct{ *storage.DB }

var errFinalFlush = errors.New("the final flush failed (injected)")

func (s closeFails) Close() error {
	if err := s.DB.Close(); err != nil {
		return err
	}
	return errFinalFlush
}

// An error at shutdown, the store's final flush included, is listen's
// error: the process exits non-zero with it.
func TestListen_StopErrorsReachTheExitStatus(t *testing.T) {
	recv := httptest.NewServer(receiver.New(receiver.Config{}))
	defer recv.Close()
	o := &listenOptions{openStore: func(path string, cfg storage.Config) (deliveryStore, error) {
		db, err := storage.Open(path, cfg)
		if err != nil {
			return nil, err
		}
		return closeFails{db}, nil
	}}
	lr := startListenWith(t, o, "--forward", recv.URL, "--data", t.TempDir())
	lr.next(t, "ready")
	lr.cancel()
	lr.cancel = nil
	select {
	case err := <-lr.done:
		if !errors.Is(err, errFinalFlush) || !strings.Contains(err.Error(), "delivery store") {
			t.Fatalf("listen stopped with %v, want the store's close error, named", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("listen did not stop")
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// runInProcess wires relay, agent, store and inspector inside this process
// as `devhook listen` does (see cmd/devhook/listen.go), runs the load
// phases and, when asked, profiles them. RSS is then the whole process,
// senders and receiver included. peers, chisel, frp or localtunnel, run
// as processes of their own all the same.
func runInProcess(ctx context.Context, o options, rep *report, recv *receiverServer, peers []*peerTunnel, dir string) error {
	rep.InProcess = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The relay, as `devhook relay serve` runs it.
	rdb, err := boltrelay.Open(filepath.Join(dir, "relay.db"), boltrelay.Config{})
	if err != nil {
		return err
	}
	defer rdb.Close()
	rln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rs, err := relay.NewServer(relay.Config{Store: rdb})
	if err != nil {
		rln.Close()
		return err
	}
	// Served as devhook relay serves it: Serve (deliveries through the
	// relay's own ingress) behind relay.LimitListener (whose connections
	// let the relay gather frames into one write(2)), so that a profile
	// holds the relay's live path.
	relayCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		rs.Serve(relayCtx, relay.LimitListener(rln, 1<<16), relay.ServeConfig{Grace: time.Second})
	}()
	defer func() { stopRelay(); <-relayDone; rs.Close() }()
	relayURL := "http://" + rln.Addr().String()
	creds, err := rs.OpenChannel(&http.Request{Host: rln.Addr().String()})
	if err != nil {
		return err
	}

	// The agent, as `devhook listen --json` runs it, with the inspector.
	db, err := storage.Open(filepath.Join(dir, "deliveries.db"), storage.Config{})
	if err != nil {
		return err
	}
	defer db.Close()
	var insp *inspector.Server
	connected := make(chan struct{}, 1)
	out := json.NewEncoder(io.Discard)
	ag, err := agent.New(agent.Config{
		RelayURL: relayURL, Credentials: creds, Forward: []string{recv.URL}, Store: db,
		Secret: o.secret, Verify: agent.VerifyReport,
		OnChange: func(c devhook.Change) {
			if insp != nil {
				insp.Publish(c)
			}
		},
		OnResult: func(r agent.Result) {
			// What listen --json prints, written nowhere.
			out.Encode(map[string]any{"event": "delivery", "id": r.Delivery.ID, "verdict": r.Delivery.Verdict.Result, "status": r.Status})
		},
		OnConnect: func(agent.Connection) {
			select {
			case connected <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	insp, err = inspector.New(inspector.Config{Store: db, Replayer: ag,
		Settings: inspector.Settings{Forward: ag.Targets(), RelayURL: relayURL, PublicURL: creds.PublicURL, Channel: creds.Channel}})
	if err != nil {
		return err
	}
	defer insp.Close()
	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	stopInsp := serveHTTP(insp, iln)
	defer stopInsp()

	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	defer func() { cancel(); <-agentDone }()
	select {
	case <-connected:
	case err := <-agentDone:
		agentDone <- err
		return fmt.Errorf("agent: %w", err)
	case <-time.After(10 * time.Second):
		return errors.New("agent did not connect within 10s")
	}

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.blockprof != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		runtime.SetMutexProfileFraction(10)
		defer runtime.SetBlockProfileRate(0)
		defer runtime.SetMutexProfileFraction(0)
	}
	rep.GoroutinesBefore = runtime.NumGoroutine()
	if err := loadPhases(ctx, o, rep, recv, creds.PublicURL+"/hook", nil, peers); err != nil {
		return err
	}
	// Idle keep-alive connections of the senders are closed; what remains
	// beyond the start is held by relay or agent.
	time.Sleep(500 * time.Millisecond)
	rep.GoroutinesAfter = runtime.NumGoroutine()
	if o.memprofile != "" {
		if err := writeProfile("allocs", o.memprofile); err != nil {
			return err
		}
	}
	if o.blockprof != "" {
		for _, name := range []string{"block", "mutex"} {
			if err := writeProfile(name, o.blockprof+"."+name); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup(name).WriteTo(f, 0)
}

// serveHTTP serves h on ln until the returned stop is called.
func serveHTTP(h http.Handler, ln net.Listener) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() {
		srv.Close()
		<-done
	}
}

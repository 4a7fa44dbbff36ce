package relay_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// BenchmarkIngress is a relay with an agent answering in this process,
// served as devhook relay serves it (IngressListener) and by net/http's
// server alone, to compare what a delivery costs the relay. cpu-µs/op is
// the whole process's CPU per delivery: the sending client, the relay and
// the agent's side of the WebSocket.
func BenchmarkIngress(b *testing.B) {
	for _, mode := range []string{"ingress-listener", "net-http"} {
		b.Run(mode, func(b *testing.B) {
			db, err := storage.OpenRelayStore(filepath.Join(b.TempDir(), "relay.db"), storage.RelayStoreConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			srv, err := relay.NewServer(relay.Config{Store: db})
			if err != nil {
				b.Fatal(err)
			}
			hs := httptest.NewUnstartedServer(srv)
			var il *relay.IngressListener
			if mode == "ingress-listener" {
				il = relay.NewIngressListener(srv, relay.LimitListener(hs.Listener, 1<<16), relay.ListenerConfig{})
				hs.Listener = il
			} else {
				hs.Listener = relay.LimitListener(hs.Listener, 1<<16)
			}
			hs.Start()
			defer func() {
				srv.Close()
				hs.Close()
				if il != nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if il.Wait(ctx) != nil {
						il.Abort()
					}
				}
			}()
			cr, err := srv.OpenChannel(nil)
			if err != nil {
				b.Fatal(err)
			}
			conn, err := relay.Dial(context.Background(), relay.DialConfig{RelayURL: hs.URL, Credentials: cr})
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := http.Header{"Content-Type": {"application/json"}}
				for {
					d, err := conn.Receive()
					if err != nil {
						return
					}
					go conn.Respond(d.ID, 200, h, []byte(`{"ok":true}`))
				}
			}()
			defer func() { conn.Close(); wg.Wait() }()
			body := bytes.Repeat([]byte("x"), 1500)
			url := hs.URL + "/c/" + cr.Channel + "/hook"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			defer client.CloseIdleConnections()
			b.SetParallelism(16) // 32 senders on 2 cores
			b.ReportAllocs()
			start := rusage(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(url, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((rusage(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func rusage(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

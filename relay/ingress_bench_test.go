package relay_test

import (
	"bytes"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIngress is a relay with an agent answering in this process,
// served as devhook relay serves it (IngressListener) and by net/http's
// server alone, to compare what a delivery costs the relay. cpu-µs/op is
// the whole process's CPU per delivery: the sending client, the relay and
// the agent's side of the WebSocket.
func BenchmarkIngress(b *testing.B) {
	for _, mode := range []string{"ingress-listener", "net-http"} {
		b.Run(mode, func(b *testing.B) {
			h := http.Header{"Content-Type": {"application/json"}}
			r := newIngressRelay(b, testRelay{plain: mode == "net-http", answer: func([]byte) (int, http.Header, []byte) {
				return 200, h, []byte(`{"ok":true}`)
			}})
			body := bytes.Repeat([]byte("x"), 1500)
			url := r.hs.URL + "/c/" + r.cr.Channel + "/hook"
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

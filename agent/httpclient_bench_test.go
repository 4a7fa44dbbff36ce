//go:build unix

package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// receiverEnv makes the test binary a receiver for BenchmarkForward, in a
// process of its own as a real receiver is: see TestBenchReceiverProcess.
const receiverEnv = "DEVHOOK_BENCH_RECEIVER"

// TestBenchReceiverProcess is BenchmarkForward's receiver when run with
// receiverEnv set: it prints its address and serves until stdin closes.
func TestBenchReceiverProcess(t *testing.T) {
	if os.Getenv(receiverEnv) == "" {
		t.Skip("the receiver process of BenchmarkForward")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(ln.Addr())
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// benchReceiver starts the receiver process and returns its URL.
func benchReceiver(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchReceiverProcess$")
	cmd.Env = append(os.Environ(), receiverEnv+"=1", "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return "http://" + strings.TrimSpace(addr)
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkForward is Agent.send of a 1.5 KB POST to a receiver in another
// process, through net/http (a Config.Client) and through the agent's own
// client, one at a time and from 32 goroutines. cpu-ns/op is this
// process's CPU time (user and system) per forward: the agent's cost.
func BenchmarkForward(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1500)
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"run-status/1.0"},
		"Service-Signature": {"t=1700000000,v1=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		"Accept-Encoding":   {"gzip"}, "X-Forwarded-For": {"203.0.113.7"}}
	recv := benchReceiver(b)
	for _, path := range []string{"net-http", "direct"} {
		for _, par := range []bool{false, true} {
			name := path + "/serial"
			if par {
				name = path + "/32"
			}
			b.Run(name, func(b *testing.B) {
				cfg := Config{Store: nopStore{}, Forward: []string{recv}, Concurrency: 64}
				if path == "net-http" {
					cfg.Client = NewClient(64, nil)
				}
				a, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer a.CloseIdleConnections()
				target := recv + "/hook"
				ctx, cancel := context.WithCancel(context.Background()) // as the agent's
				defer cancel()
				one := func() {
					at := devhook.Attempt{Target: target}
					a.send(ctx, &at, http.MethodPost, header, body)
					if at.Status != 200 {
						b.Fatalf("%d %s", at.Status, at.Error)
					}
				}
				one() // connect
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				cpu := cpuTime()
				b.ResetTimer()
				if !par {
					for i := 0; i < b.N; i++ {
						one()
					}
				} else {
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							one()
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

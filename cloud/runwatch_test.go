package cloud_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
)

// scriptedRun is a service with one run, app/r, whose n-th metadata read
// answers meta(n) and n-th log read log(n) (from 1): a status, or an HTTP
// status to fail with.
type scriptedRun struct {
	mu          sync.Mutex
	metaN, logN int
	meta        func(n int) (status string, fail int)
	log         func(n int) string
}

func (s *scriptedRun) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/v1/applications/app/runs/r/metadata", "/v1/applications/app/runs/r":
		status := "succeeded" // the whole record, read at the end
		if strings.HasSuffix(r.URL.Path, "/metadata") {
			s.metaN++
			var fail int
			if status, fail = s.meta(s.metaN); fail != 0 {
				http.Error(w, `{"error":"scripted"}`, fail)
				return
			}
		}
		fmt.Fprintf(w, `{"id":"r","metadata":{"status_v2":%q,"output_size":0}}`, status)
	case "/v1/applications/app/runs/r/logs":
		s.logN++
		fmt.Fprintf(w, `{"log":%q}`, s.log(s.logN))
	default:
		http.Error(w, `{"error":"no such run"}`, 404)
	}
}

func (s *scriptedRun) reads() (meta, log int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metaN, s.logN
}

func scriptedClient(t *testing.T, s *scriptedRun) *cloud.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pacer is a RunWatch.After that waits for nothing and records the waits.
type pacer struct{ waits []time.Duration }

func (p *pacer) after(d time.Duration) <-chan time.Time {
	p.waits = append(p.waits, d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

const ms = time.Millisecond

// WatchRun reads 250 ms after a change, twice as long after each read
// that changed nothing, up to 2 s, and 250 ms again after new text in the
// log; it hands on only the new text, the end after the run ended.
func TestWatchRun_BacksOffWhileNothingChanges(t *testing.T) {
	s := &scriptedRun{
		meta: func(n int) (string, int) {
			if n < 8 {
				return "running", 0
			}
			return "succeeded", 0
		},
		log: func(n int) string {
			switch {
			case n < 6:
				return ""
			case n < 8:
				return "a\n"
			}
			return "a\nb\n"
		},
	}
	p := &pacer{}
	var pieces, statuses []string
	r, err := scriptedClient(t, s).WatchRun(t.Context(), "app", "r", cloud.RunWatch{After: p.after,
		OnStatus: func(r cloud.Run) { statuses = append(statuses, r.Status()) },
		OnLog:    func(text string, gap bool) error { pieces = append(pieces, fmt.Sprint(text, gap)); return nil }})
	if err != nil || r.Status() != "succeeded" {
		t.Fatalf("WatchRun: %v, %v", r.Status(), err)
	}
	if want := []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 2 * time.Second, 250 * ms, 500 * ms}; !slices.Equal(p.waits, want) {
		t.Errorf("waits %v, want %v", p.waits, want)
	}
	if want := []string{"a\nfalse", "b\nfalse"}; !slices.Equal(pieces, want) {
		t.Errorf("log pieces %q, want %q", pieces, want)
	}
	if want := []string{"running", "succeeded"}; !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	if m, l := s.reads(); m != 8 || l != 9 {
		t.Errorf("%d metadata and %d log reads, want 8 and 9 (the log once more at the end)", m, l)
	}
}

// Reads that fail with a 5xx are tried again, backing off, and said once
// each way; MaxFailures of them in a row end the watch; a 404 ends it at
// once.
func TestWatchRun_Failures(t *testing.T) {
	script := func(fails map[int]int) func(int) (string, int) {
		return func(n int) (string, int) {
			if f, ok := fails[n]; ok {
				return "", f
			}
			if n >= 5 {
				return "succeeded", 0
			}
			return "running", 0
		}
	}
	s := &scriptedRun{meta: script(map[int]int{2: 503, 3: 502})}
	p := &pacer{}
	var trouble []string
	r, err := scriptedClient(t, s).WatchRun(t.Context(), "app", "r", cloud.RunWatch{After: p.after,
		OnTrouble: func(err error, n int) { trouble = append(trouble, fmt.Sprint(err != nil, n)) }})
	if err != nil || r.Status() != "succeeded" {
		t.Fatalf("WatchRun: %v, %v", r.Status(), err)
	}
	if want := []string{"true 1", "false 2"}; !slices.Equal(trouble, want) {
		t.Errorf("OnTrouble calls %v, want %v", trouble, want)
	}
	if want := []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second}; !slices.Equal(p.waits, want) {
		t.Errorf("waits %v, want %v", p.waits, want)
	}

	s = &scriptedRun{meta: func(n int) (string, int) { return "", 503 }}
	_, err = scriptedClient(t, s).WatchRun(t.Context(), "app", "r", cloud.RunWatch{After: (&pacer{}).after, MaxFailures: 3})
	if m, _ := s.reads(); err == nil || !strings.Contains(err.Error(), "3 reads in a row failed") || !strings.Contains(err.Error(), "503") || m != 3 {
		t.Errorf("always 503: %v after %d reads", err, m)
	}
	s = &scriptedRun{meta: func(n int) (string, int) { return "", 404 }}
	_, err = scriptedClient(t, s).WatchRun(t.Context(), "app", "r", cloud.RunWatch{After: (&pacer{}).after})
	if m, _ := s.reads(); !cloud.IsNotFound(err) || m != 1 {
		t.Errorf("a 404: %v after %d reads", err, m)
	}
}

// A log whose start the service drops (as the emulator does past its
// bound, after a line saying so) is followed on from where it was read
// last; when none of what was read is left, the whole log comes with gap.
func TestWatchRun_LogWhoseStartIsDropped(t *testing.T) {
	l1, l2, l3, l4 := "the first line of the log\n", "the second line of the log\n", "the third line of the log\n", "a line after many more\n"
	logs := []string{l1 + l2, "[… 26 earlier bytes of the log left out]\n" + l2 + l3, "[… 900 earlier bytes of the log left out]\n" + l4}
	s := &scriptedRun{
		meta: func(n int) (string, int) {
			if n < 3 {
				return "running", 0
			}
			return "failed", 0
		},
		log: func(n int) string { return logs[min(n, len(logs))-1] },
	}
	var pieces []string
	_, err := scriptedClient(t, s).WatchRun(t.Context(), "app", "r", cloud.RunWatch{After: (&pacer{}).after,
		OnLog: func(text string, gap bool) error { pieces = append(pieces, fmt.Sprint(text, gap)); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{l1 + l2 + "false", l3 + "false", logs[2] + "true"}; !slices.Equal(pieces, want) {
		t.Errorf("log pieces %q, want %q", pieces, want)
	}
}

// An error from OnLog (the terminal gone) ends the watch with it.
func TestWatchRun_OnLogError(t *testing.T) {
	s := &scriptedRun{meta: func(int) (string, int) { return "running", 0 }, log: func(int) string { return "x\n" }}
	stop := errors.New("stdout closed")
	_, err := scriptedClient(t, s).WatchRun(t.Context(), "app", "r", cloud.RunWatch{After: (&pacer{}).after,
		OnLog: func(string, bool) error { return stop }})
	if _, l := s.reads(); !errors.Is(err, stop) || l != 1 {
		t.Errorf("WatchRun: %v after %d log reads, want %v after one", err, l, stop)
	}
}

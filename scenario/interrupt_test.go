package scenario_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/junit/junittest"
	"github.com/devhook/devhook/scenario"
)

// syncBuffer is what Progress writes to, read while Play runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Each delivery's line reaches Progress as soon as it is answered: when
// play waits for the second delivery's time, the first's line is out and
// the second's is not. The lines, heading first, are what WriteText
// writes of the report.
func TestPlay_ProgressLineAsEachDeliveryIsAnswered(t *testing.T) {
	srv, _ := referenceServer(t)
	clk := &clock{now: time.Now()}
	var progress syncBuffer
	var before []string // what Progress held at each wait
	sleep := func(ctx context.Context, d time.Duration) error {
		before = append(before, progress.String())
		return clk.Sleep(ctx, d)
	}
	rep, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: srv.URL, Secret: secret,
		Now: clk.Now, Sleep: sleep, Progress: &progress, Name: "run.json"})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 {
		t.Fatalf("%d waits, want 2", len(before))
	}
	if first := before[0]; !strings.Contains(first, "1 run.status queued run-42") || strings.Contains(first, "2 run.status running") {
		t.Errorf("while waiting for delivery 2, the progress was:\n%s", first)
	}
	if second := before[1]; !strings.Contains(second, "2 run.status running run-42") || strings.Contains(second, "3 run.status") {
		t.Errorf("while waiting for delivery 3, the progress was:\n%s", second)
	}
	for _, want := range []string{"devhook scenario play run.json → " + srv.URL, "DELIVERY", "POST /hook +1.25s, signed", "2xx (recorded 200)", "pass"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("the progress does not say %q:\n%s", want, progress.String())
		}
	}
	var text, summary strings.Builder
	rep.WriteText(&text, "run.json")
	rep.WriteSummary(&summary)
	if text.String() != progress.String()+summary.String() {
		t.Errorf("WriteText differs from the progress and the summary:\n%s\n---\n%s%s", text.String(), progress.String(), summary.String())
	}
}

// Interrupted while waiting for its time, the second delivery is not
// sent: the report has the first, says where play stopped and why, and
// its JUnit file has the first as a pass, the second as an error saying
// it was interrupted and the third as skipped, as junitparser reads it.
func TestPlay_InterruptedBetweenDeliveries(t *testing.T) {
	srv, got := referenceServer(t)
	clk := &clock{now: time.Now()}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	signal := errors.New("interrupted by SIGINT")
	sleep := func(ctx context.Context, d time.Duration) error {
		cancel(signal) // Ctrl-C while play waits for delivery 2
		<-ctx.Done()
		return ctx.Err()
	}
	var progress syncBuffer
	rep, err := scenario.Play(ctx, runScenario(t), scenario.Config{URL: srv.URL, Secret: secret, Now: clk.Now, Sleep: sleep, Progress: &progress, Name: "run.json"})
	if !errors.Is(err, signal) || rep == nil {
		t.Fatalf("Play: %v, report %v; want the cause and a report", err, rep)
	}
	if n := len(got.reqs); n != 1 {
		t.Errorf("the handler got %d deliveries, want 1", n)
	}
	in := rep.Interrupted
	if rep.Pass || len(rep.Results) != 1 || !rep.Results[0].Pass || in == nil || in.Reason != "interrupted by SIGINT" || in.InFlight ||
		len(in.Unplayed) != 2 || in.Unplayed[0].N != 2 || in.Unplayed[1].N != 3 || !strings.HasPrefix(in.Unplayed[0].Label, "run.status running") {
		t.Fatalf("report %+v, interruption %+v", rep, in)
	}
	var summary strings.Builder
	rep.WriteSummary(&summary)
	out := progress.String() + summary.String()
	for _, want := range []string{"STOPPED  interrupted by SIGINT before it was sent",
		"STOPPED: interrupted by SIGINT at delivery 2 of 3, before it was sent; 1 played (0 answered otherwise than expected), 2 not played."} {
		if !strings.Contains(out, want) {
			t.Errorf("the text does not say %q:\n%s", want, out)
		}
	}

	file := filepath.Join(t.TempDir(), "play.xml")
	if err := rep.JUnit("run.json").WriteFile(file); err != nil {
		t.Fatal(err)
	}
	suites := junittest.Read(t, file)
	if len(suites) != 1 {
		t.Fatalf("junitparser reads %d suites", len(suites))
	}
	s := suites[0]
	if s.Tests != 3 || s.Failures != 0 || s.Errors != 1 || s.Skipped != 1 || len(s.Cases) != 3 {
		t.Fatalf("suite %+v", s)
	}
	if c := s.Cases[0]; len(c.Result) != 0 || !strings.HasPrefix(c.Name, "delivery 1: run.status queued") {
		t.Errorf("case 1 %+v, want a pass", c)
	}
	if c := s.Cases[1]; len(c.Result) != 1 || c.Result[0].Kind != "Error" || !strings.HasPrefix(c.Name, "delivery 2: run.status running") ||
		!strings.Contains(c.Result[0].Message, "interrupted by SIGINT before it was sent: play stopped here, after 1 of 3 deliveries") {
		t.Errorf("case 2 %+v, want the error of the interruption", c)
	}
	if c := s.Cases[2]; len(c.Result) != 1 || c.Result[0].Kind != "Skipped" || !strings.Contains(c.Result[0].Message, "not played: interrupted by SIGINT") {
		t.Errorf("case 3 %+v, want skipped", c)
	}
}

// Interrupted while the handler holds the second delivery, play does not
// wait for the answer: the delivery is under way, not a handler's failure.
func TestPlay_InterruptedWaitingForTheAnswer(t *testing.T) {
	arrived := make(chan struct{}, 3)
	var n int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // so that the server sees the connection close
		mu.Lock()
		n++
		hold := n == 2
		mu.Unlock()
		arrived <- struct{}{}
		if hold {
			<-r.Context().Done() // until play gives up on it
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		<-arrived
		<-arrived // the second is held: Ctrl-C
		cancel(errors.New("interrupted by SIGTERM"))
	}()
	rep, err := scenario.Play(ctx, runScenario(t), scenario.Config{URL: srv.URL, Secret: secret, NoWait: true, Timeout: time.Hour})
	if err == nil || rep == nil || !strings.Contains(err.Error(), "play stopped at delivery 2 of 3: interrupted by SIGTERM") {
		t.Fatalf("Play: %v, report %v", err, rep)
	}
	if in := rep.Interrupted; len(rep.Results) != 1 || rep.Failed != 0 || in == nil || !in.InFlight || in.Unplayed[0].N != 2 {
		t.Fatalf("report %+v, interruption %+v", rep, in)
	}
	var text strings.Builder
	rep.WriteText(&text, "run.json")
	if !strings.Contains(text.String(), "interrupted by SIGTERM while waiting for the answer") ||
		!strings.Contains(text.String(), "STOPPED: interrupted by SIGTERM at delivery 2 of 3, while waiting for its answer") {
		t.Errorf("text:\n%s", text.String())
	}
}

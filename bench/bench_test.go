package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHarness runs every phase with tiny numbers: the harness still works
// and the tunnel delivers each request once. It says nothing about speed.
func TestHarness(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build devhook with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	o := options{n: 50, duration: 20 * time.Second, conc: []int{1, 4}, idle: 20, list: 200,
		secret: "whsec_test", stdout: &out, logf: t.Logf}
	rep, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 4 {
		t.Fatalf("%d phases, want direct and tunnel at 2 concurrencies", len(rep.Phases))
	}
	for _, p := range rep.Phases {
		if p.Sent != o.n || p.OK != o.n || p.Delivered != o.n || p.Duplicates != 0 || p.BadSignatures != 0 {
			t.Errorf("%s c=%d: sent %d, 2xx %d, delivered %d, duplicates %d, bad signatures %d; want %d delivered once (%s)",
				p.Phase, p.Concurrency, p.Sent, p.OK, p.Delivered, p.Duplicates, p.BadSignatures, o.n, p.FirstError)
		}
		if p.Phase == "tunnel" && p.AgentLines != int64(o.n) {
			t.Errorf("tunnel c=%d: the agent printed %d delivery lines, want %d", p.Concurrency, p.AgentLines, o.n)
		}
	}
	if rep.List == nil || rep.List.Items == 0 || rep.List.Failed != 0 {
		t.Errorf("inspector list phase: %+v", rep.List)
	}
	if rep.Idle == nil || rep.Idle.Connected != o.idle {
		t.Errorf("idle phase: %+v", rep.Idle)
	}

	rep.writeText(&out)
	for _, want := range []string{"tunnel", "direct", "inspector GET /api/deliveries", "idle: 20 of 20"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	md := filepath.Join(t.TempDir(), "report.md")
	if err := rep.save(md); err != nil {
		t.Fatal(err)
	}
	if err := rep.save(filepath.Join(t.TempDir(), "report.json")); err != nil {
		t.Fatal(err)
	}
}

func TestPayload(t *testing.T) {
	p := newPayload()
	for _, id := range []string{seqID("t1", 0), seqID("d32", 19999), "short"} {
		b := p.body(id)
		if len(b) != bodySize {
			t.Errorf("body of %q is %d bytes, want %d", id, len(b), bodySize)
		}
		if got := runIDOf(b); got != id {
			t.Errorf("runIDOf(body(%q)) = %q", id, got)
		}
	}
}

func TestParseConc(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1,32", []int{1, 32}, true},
		{" 4 , 8,", []int{4, 8}, true},
		{"0", nil, false},
		{"x", nil, false},
	} {
		got, err := parseConc(tc.in)
		if (err == nil) != tc.ok || len(got) != len(tc.want) {
			t.Errorf("parseConc(%q) = %v, %v", tc.in, got, err)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseConc(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	o := options{n: 50, duration: 20 * time.Second, conc: []int{1, 4}, rounds: 2, idle: 20, list: 200,
		secret: "whsec_test", stdout: &out, logf: t.Logf}
	rep, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, p := range rep.Phases {
		order = append(order, fmt.Sprintf("%s%d#%d", p.Phase, p.Concurrency, p.Round))
	}
	if got, want := strings.Join(order, " "), "direct1#1 tunnel1#1 direct4#1 tunnel4#1 direct1#2 tunnel1#2 direct4#2 tunnel4#2"; got != want {
		t.Fatalf("phases %s, want %s", got, want)
	}
	// Each phase counts its own round's deliveries only: a second round
	// counting the first's would see 2n delivered.
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
	for _, want := range []string{"tunnel #2", "direct #1", "c=1 over 2 rounds: ", "c=4 over 2 rounds: ", "delivered 100 of 100 sent, 0 duplicates",
		"inspector GET /api/deliveries", "idle: 20 of 20"} {
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

// TestHarnessChisel runs the load phases with a chisel phase between the
// direct and the tunnel ones, with devhook as processes and in this
// process. It needs a chisel binary: set DEVHOOK_CHISEL to its path.
func TestHarnessChisel(t *testing.T) {
	bin := os.Getenv("DEVHOOK_CHISEL")
	if bin == "" {
		t.Skip("DEVHOOK_CHISEL is not set to a chisel binary")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build devhook with")
	}
	for _, inproc := range []bool{false, true} {
		t.Run(map[bool]string{false: "processes", true: "inproc"}[inproc], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			o := options{n: 50, duration: 20 * time.Second, conc: []int{1, 4}, secret: "whsec_test",
				chisel: bin, inproc: inproc, stdout: &out, logf: t.Logf}
			rep, err := run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, p := range rep.Phases {
				kinds = append(kinds, fmt.Sprintf("%s%d", p.Phase, p.Concurrency))
				if p.Sent != o.n || p.OK != o.n || p.Delivered != o.n || p.Duplicates != 0 || p.BadSignatures != 0 {
					t.Errorf("%s c=%d: sent %d, 2xx %d, delivered %d, duplicates %d, bad signatures %d; want %d delivered once (%s)",
						p.Phase, p.Concurrency, p.Sent, p.OK, p.Delivered, p.Duplicates, p.BadSignatures, o.n, p.FirstError)
				}
				switch p.Phase {
				case "chisel":
					if p.RSSRelay == 0 || p.RSSAgent == 0 || p.Ratio == 0 {
						t.Errorf("chisel c=%d: server RSS %.1f, client RSS %.1f, ratio to direct %.2f: want all measured", p.Concurrency, p.RSSRelay, p.RSSAgent, p.Ratio)
					}
					if p.ChiselComparison != nil {
						t.Errorf("chisel c=%d is compared with chisel", p.Concurrency)
					}
				case "tunnel":
					if p.ChiselComparison == nil || p.RatioChisel == 0 || p.ChiselRPS == 0 {
						t.Errorf("tunnel c=%d: comparison with chisel %+v", p.Concurrency, p.ChiselComparison)
					}
				}
			}
			if got, want := strings.Join(kinds, " "), "direct1 chisel1 tunnel1 direct4 chisel4 tunnel4"; got != want {
				t.Errorf("phases %s, want %s", got, want)
			}
			rep.writeText(&out)
			for _, want := range []string{"c=1: devhook ", "c=4: devhook ", "× chisel"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// chiselPhases is a run's phases at one concurrency, with fixed figures.
func chiselPhases() []phaseResult {
	direct := phaseResult{Phase: "direct", Concurrency: 32, RPS: 20000, P50: 0.2, P99: 0.9}
	chisel := phaseResult{Phase: "chisel", Concurrency: 32, RPS: 8550, P50: 0.47, P99: 1.1,
		RSSRelay: 15.5, RSSAgent: 17.25, CPURelay: 50, CPUAgent: 51, CPUTotal: 101}
	tunnel := phaseResult{Phase: "tunnel", Concurrency: 32, RPS: 8892, P50: 0.49, P99: 1.2,
		RSSRelay: 20, RSSAgent: 24.1, CPURelay: 40, CPUAgent: 64, CPUTotal: 104}
	tunnel.compareToChisel(chisel)
	return []phaseResult{direct, chisel, tunnel}
}

func TestCompareToChisel(t *testing.T) {
	tun := chiselPhases()[2]
	c := tun.ChiselComparison
	if c == nil {
		t.Fatal("no comparison")
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(c.RatioChisel, 8892.0/8550) || !near(c.P50Diff, 0.02) || c.ChiselRPS != 8550 || c.ChiselP50 != 0.47 ||
		c.ChiselP99 != 1.1 || c.ChiselCPU != 101 || c.ChiselRSS != 32.75 {
		t.Errorf("comparison %+v", *c)
	}

	// Against a chisel phase that got nothing through: no ratio, not +Inf.
	tun.compareToChisel(phaseResult{Phase: "chisel"})
	if tun.RatioChisel != 0 {
		t.Errorf("ratio to a chisel at 0 req/s: %v", tun.RatioChisel)
	}

	// The JSON has the comparison's fields flat on tunnel phases, and none
	// of them on others.
	b, err := json.Marshal(chiselPhases())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ratio_to_chisel", "p50_minus_chisel_ms", "chisel_cpu_us_per_request", "chisel_rps"} {
		if _, ok := got[2][k]; !ok {
			t.Errorf("tunnel phase JSON lacks %s: %s", k, b)
		}
		if _, ok := got[1][k]; ok {
			t.Errorf("chisel phase JSON has %s: %s", k, b)
		}
	}
	if got[2]["cpu_us_per_request"] != 104.0 || got[1]["cpu_us_per_request"] != 101.0 {
		t.Errorf("cpu_us_per_request: %s", b)
	}
}

func TestChiselSummary(t *testing.T) {
	rep := &report{Phases: chiselPhases()}
	got := rep.chiselSummary()
	want := []string{"c=32: devhook 8,892 req/s = 1.04 × chisel (8,550); p50 0.49 ms vs chisel 0.47 ms (+0.02 ms), p99 1.20 ms vs chisel 1.10 ms; " +
		"tunnel CPU 104 µs vs chisel 101 µs per request; peak RSS relay+agent 44.1 MiB vs chisel server+client 32.8 MiB"}
	if !slices.Equal(got, want) {
		t.Errorf("summary:\n%q\nwant\n%q", got, want)
	}

	var out bytes.Buffer
	rep.writeText(&out)
	for _, w := range append(want, "× chisel", "tunnel CPU µs/req") {
		if !strings.Contains(out.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, out.String())
		}
	}

	rep.InProcess = true
	if got := rep.chiselSummary(); len(got) != 1 || !strings.Contains(got[0], "the whole harness process") {
		t.Errorf("in-process summary %q does not say the CPU and RSS are the whole process's", got)
	}

	// Without chisel, no summary.
	rep = &report{Phases: []phaseResult{{Phase: "direct", Concurrency: 1}, {Phase: "tunnel", Concurrency: 1}}}
	if got := rep.chiselSummary(); len(got) != 0 {
		t.Errorf("summary without chisel: %q", got)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999.4: "999", 999.6: "1,000", 8550: "8,550", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestRoundsSummary(t *testing.T) {
	var phases []phaseResult
	for i, f := range []struct{ rps, cpu, chRPS, chCPU, p50, chP50, p99, rss float64 }{
		{8000, 120, 11000, 70, 3.1, 2.3, 9.5, 58.2},
		{9000, 116, 12000, 66, 3.0, 2.2, 9.0, 59.3},
		{7000, 130, 10000, 80, 3.4, 2.5, 11.2, 57.5},
	} {
		ch := phaseResult{Phase: "chisel", Concurrency: 32, Round: i + 1, RPS: f.chRPS, P50: f.chP50, CPUTotal: f.chCPU}
		tun := phaseResult{Phase: "tunnel", Concurrency: 32, Round: i + 1, RPS: f.rps, Ratio: f.rps / 30000, P50: f.p50, P99: f.p99,
			CPUTotal: f.cpu, RSSRelay: f.rss - 30, RSSAgent: 30, Sent: 100, Delivered: 100}
		tun.compareToChisel(ch)
		phases = append(phases, phaseResult{Phase: "direct", Concurrency: 32, Round: i + 1}, ch, tun)
	}
	rep := &report{Rounds: 3, Phases: phases}
	want := []string{"c=32 over 3 rounds: devhook 7,000–9,000 req/s = 0.70–0.75 × chisel (median 0.73); tunnel CPU 116–130 µs = " +
		"1.62–1.76 × chisel's (66–80 µs); p50 +0.80 to +0.90 ms over chisel's, p99 9.00–11.20 ms; peak RSS relay+agent 57.5–59.3 MiB; " +
		"delivered 300 of 300 sent, 0 duplicates"}
	if got := rep.roundsSummary(); !slices.Equal(got, want) {
		t.Errorf("summary:\n%q\nwant\n%q", got, want)
	}
	var out bytes.Buffer
	rep.writeText(&out)
	if !strings.Contains(out.String(), want[0]) || !strings.Contains(out.String(), "tunnel #3") {
		t.Errorf("text report lacks the summary or the rounds' rows:\n%s", out.String())
	}

	// Without chisel: against direct.
	var plain []phaseResult
	for _, p := range phases {
		if p.Phase == "tunnel" {
			p.ChiselComparison = nil
			plain = append(plain, p)
		}
	}
	rep = &report{Rounds: 3, Phases: plain}
	if got := rep.roundsSummary(); len(got) != 1 || !strings.Contains(got[0], "= 0.23–0.30 × direct; tunnel CPU 116–130 µs; p50 3.00–3.40 ms, p99") {
		t.Errorf("summary without chisel: %q", got)
	}

	// One round: the run's own rows say it all.
	rep.Rounds = 0
	if got := rep.roundsSummary(); got != nil {
		t.Errorf("summary of one round: %q", got)
	}
}

func TestSpreadAndMedian(t *testing.T) {
	for _, tc := range []struct {
		vals []float64
		f    func(float64) string
		want string
	}{
		{nil, fixed2, "n/a"},
		{[]float64{1.004, 0.996}, fixed2, "1.00"},
		{[]float64{0.7, 0.9, 0.8}, fixed2, "0.70–0.90"},
		{[]float64{0.08, -0.01}, signed2, "-0.01 to +0.08"},
		{[]float64{9000, 12345}, thousands, "9,000–12,345"},
	} {
		if got := spread(tc.vals, tc.f); got != tc.want {
			t.Errorf("spread(%v) = %q, want %q", tc.vals, got, tc.want)
		}
	}
	vals := []float64{3, 1, 2, 4}
	if m := median(vals); m != 2.5 || vals[0] != 3 {
		t.Errorf("median(3 1 2 4) = %v (vals now %v)", m, vals)
	}
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median(5 1 3) = %v", m)
	}
}

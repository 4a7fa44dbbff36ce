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
		drain: 60, drainRuns: 6, drainLive: 20, secret: "whsec_test", stdout: &out, logf: t.Logf}
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
	if d := rep.Drain; d == nil || d.Queued != o.drain || d.OutOfOrder != 0 || d.RPS <= 0 || d.EmptySecs <= 0 || d.LiveDuring == nil || d.LiveAfter == nil {
		t.Errorf("drain phase: %+v", rep.Drain)
	} else {
		// Every delivery the relay took reached the receiver once; live
		// ones came all along, and were answered once the queue was empty.
		took := d.Queued + d.LiveDuring.OK + d.LiveDuring.Queued + d.LiveAfter.OK + d.LiveAfter.Queued
		if d.Delivered != took || d.Duplicates != 0 || d.LiveAfter.Sent == 0 || d.LiveAfter.OK == 0 || d.FirstError != "" {
			t.Errorf("drain phase under live load: %d delivered, %d duplicates, want the %d the relay took once; live during %+v, after %+v; %s",
				d.Delivered, d.Duplicates, took, *d.LiveDuring, *d.LiveAfter, d.FirstError)
		}
	}

	rep.writeText(&out)
	for _, want := range []string{"tunnel #2", "direct #1", "c=1 over 2 rounds: ", "c=4 over 2 rounds: ", "delivered 100 of 100 sent, 0 duplicates",
		"inspector GET /api/deliveries", "idle: 20 of 20", "drain: a backlog of 60 queued deliveries over 6 runs", "drained under live load of 20 deliveries/s", "drain: live once the queue was empty"} {
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

// TestHarnessPeers runs the load phases with a phase through each peer
// between the direct and the tunnel ones, with devhook as processes and
// in this process. It needs the peers: set DEVHOOK_CHISEL to a chisel
// binary, DEVHOOK_FRP to a directory of frps and frpc, DEVHOOK_LOCALTUNNEL
// to a localtunnel directory (see -localtunnel); those set are run.
func TestHarnessPeers(t *testing.T) {
	o := options{n: 50, duration: 20 * time.Second, conc: []int{1, 4}, secret: "whsec_test", logf: t.Logf,
		chisel: os.Getenv("DEVHOOK_CHISEL"), frp: os.Getenv("DEVHOOK_FRP"), localtunnel: os.Getenv("DEVHOOK_LOCALTUNNEL")}
	var peers []string
	for _, p := range []struct{ name, path string }{{"chisel", o.chisel}, {"frp", o.frp}, {"localtunnel", o.localtunnel}} {
		if p.path != "" {
			peers = append(peers, p.name)
		}
	}
	if len(peers) == 0 {
		t.Skip("none of DEVHOOK_CHISEL, DEVHOOK_FRP and DEVHOOK_LOCALTUNNEL is set")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build devhook with")
	}
	var want []string
	for _, c := range o.conc {
		want = append(want, fmt.Sprintf("direct%d", c))
		for _, p := range peers {
			want = append(want, fmt.Sprintf("%s%d", p, c))
		}
		want = append(want, fmt.Sprintf("tunnel%d", c))
	}
	for _, inproc := range []bool{false, true} {
		t.Run(map[bool]string{false: "processes", true: "inproc"}[inproc], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			o := o
			o.inproc, o.stdout = inproc, &out
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
				switch {
				case p.Phase == "tunnel":
					for _, name := range peers {
						if c := p.versus(name); c == nil || c.Ratio == 0 || c.RPS == 0 {
							t.Errorf("tunnel c=%d: comparison with %s %+v", p.Concurrency, name, c)
						}
					}
					if len(p.Versus) != len(peers) {
						t.Errorf("tunnel c=%d: compared with %d peers, want %d", p.Concurrency, len(p.Versus), len(peers))
					}
				case p.Phase != "direct":
					if p.RSSRelay == 0 || p.RSSAgent == 0 || p.Ratio == 0 {
						t.Errorf("%s c=%d: server RSS %.1f, client RSS %.1f, ratio to direct %.2f: want all measured",
							p.Phase, p.Concurrency, p.RSSRelay, p.RSSAgent, p.Ratio)
					}
					if len(p.Versus) != 0 {
						t.Errorf("%s c=%d is compared with peers: %+v", p.Phase, p.Concurrency, p.Versus)
					}
				}
			}
			if got, want := strings.Join(kinds, " "), strings.Join(want, " "); got != want {
				t.Errorf("phases %s, want %s", got, want)
			}
			if len(rep.Peers) != len(peers) {
				t.Errorf("report's peers %+v, want %v", rep.Peers, peers)
			}
			rep.writeText(&out)
			for _, name := range peers {
				for _, want := range []string{"c=1: devhook ", "c=4: devhook ", "× " + name + " ("} {
					if !strings.Contains(out.String(), want) {
						t.Errorf("report lacks %q:\n%s", want, out.String())
					}
				}
			}
		})
	}
}

// peerPhases is a run's phases at one concurrency, with fixed figures:
// direct, chisel, frp and the tunnel.
func peerPhases() []phaseResult {
	direct := phaseResult{Phase: "direct", Concurrency: 32, RPS: 20000, P50: 0.2, P99: 0.9}
	chisel := phaseResult{Phase: "chisel", Concurrency: 32, RPS: 8550, P50: 0.47, P99: 1.1,
		RSSRelay: 15.5, RSSAgent: 17.25, CPURelay: 50, CPUAgent: 51, CPUTotal: 101}
	frp := phaseResult{Phase: "frp", Concurrency: 32, RPS: 4446, P50: 0.9, P99: 3,
		RSSRelay: 30, RSSAgent: 20, CPURelay: 100, CPUAgent: 108, CPUTotal: 208}
	tunnel := phaseResult{Phase: "tunnel", Concurrency: 32, RPS: 8892, P50: 0.49, P99: 1.2,
		RSSRelay: 20, RSSAgent: 24.1, CPURelay: 40, CPUAgent: 64, CPUTotal: 104}
	tunnel.compareTo(chisel)
	tunnel.compareTo(frp)
	return []phaseResult{direct, chisel, frp, tunnel}
}

func TestCompareTo(t *testing.T) {
	tun := peerPhases()[3]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	c := tun.versus("chisel")
	if c == nil {
		t.Fatal("no comparison with chisel")
	}
	if c.Peer != "chisel" || !near(c.Ratio, 8892.0/8550) || !near(c.P50Diff, 0.02) || c.RPS != 8550 || c.P50 != 0.47 ||
		c.P99 != 1.1 || c.CPU != 101 || c.RSS != 32.75 {
		t.Errorf("comparison with chisel %+v", *c)
	}
	f := tun.versus("frp")
	if f == nil || f.Ratio != 2 || !near(f.P50Diff, -0.41) || f.CPU != 208 || f.RSS != 50 {
		t.Errorf("comparison with frp %+v", f)
	}
	if tun.versus("localtunnel") != nil {
		t.Error("a comparison with a peer that did not run")
	}

	// Against a peer's phase that got nothing through: no ratio, not +Inf.
	tun.Versus = nil
	tun.compareTo(phaseResult{Phase: "chisel"})
	if c := tun.versus("chisel"); c == nil || c.Ratio != 0 {
		t.Errorf("ratio to a chisel at 0 req/s: %+v", c)
	}

	// The JSON has the comparisons on tunnel phases, one object per peer
	// with every figure, and none on others.
	b, err := json.Marshal(peerPhases())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	vs, _ := got[3]["versus"].([]any)
	if len(vs) != 2 {
		t.Fatalf("tunnel phase JSON: versus %v, want two peers: %s", got[3]["versus"], b)
	}
	for i, name := range []string{"chisel", "frp"} {
		m, _ := vs[i].(map[string]any)
		if m["peer"] != name {
			t.Errorf("versus[%d] is %v, want %s", i, m["peer"], name)
		}
		for _, k := range []string{"ratio", "rps", "p50_minus_peer_ms", "p50_ms", "p99_ms", "cpu_us_per_request", "peak_rss_mib"} {
			if _, ok := m[k]; !ok {
				t.Errorf("versus %s lacks %s: %s", name, k, b)
			}
		}
	}
	for _, i := range []int{0, 1, 2} {
		if _, ok := got[i]["versus"]; ok {
			t.Errorf("%s phase JSON has versus: %s", got[i]["phase"], b)
		}
	}
	if got[3]["cpu_us_per_request"] != 104.0 || got[1]["cpu_us_per_request"] != 101.0 {
		t.Errorf("cpu_us_per_request: %s", b)
	}
}

func TestPeerSummary(t *testing.T) {
	rep := &report{Phases: peerPhases(), Peers: []peerInfo{{Name: "chisel", Version: "1.11.5", Mode: "reverse port"}, {Name: "frp", Mode: "http proxy"}}}
	got := rep.peerSummary()
	want := []string{"c=32: devhook 8,892 req/s = 1.04 × chisel (8,550); p50 0.49 ms vs chisel 0.47 ms (+0.02 ms), p99 1.20 ms vs chisel 1.10 ms; " +
		"tunnel CPU 104 µs vs chisel 101 µs per request; peak RSS relay+agent 44.1 MiB vs chisel server+client 32.8 MiB",
		"c=32: devhook 8,892 req/s = 2.00 × frp (4,446); p50 0.49 ms vs frp 0.90 ms (-0.41 ms), p99 1.20 ms vs frp 3.00 ms; " +
			"tunnel CPU 104 µs vs frp 208 µs per request; peak RSS relay+agent 44.1 MiB vs frp server+client 50.0 MiB"}
	if !slices.Equal(got, want) {
		t.Errorf("summary:\n%q\nwant\n%q", got, want)
	}

	var out bytes.Buffer
	rep.writeText(&out)
	for _, w := range append(want, "× chisel", "× frp", "tunnel CPU µs/req", "chisel and frp rows", "chisel 1.11.5: reverse port", "frp: http proxy") {
		if !strings.Contains(out.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String(), "× localtunnel") {
		t.Errorf("text report has a column for a peer that did not run:\n%s", out.String())
	}

	// The markdown table: a column per peer, the ratios in the tunnel's
	// row only, and every row as wide as the header.
	var md bytes.Buffer
	rep.writeTable(&md, true)
	var rows []string
	for l := range strings.Lines(md.String()) {
		if strings.HasPrefix(l, "| ") && strings.Contains(l, "conc") || strings.HasPrefix(l, "| direct") ||
			strings.HasPrefix(l, "| chisel") || strings.HasPrefix(l, "| frp") || strings.HasPrefix(l, "| tunnel") || strings.HasPrefix(l, "| ---") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 6 {
		t.Fatalf("markdown table rows %q", rows)
	}
	for _, r := range rows {
		if n := strings.Count(r, "|"); n != strings.Count(rows[0], "|") {
			t.Errorf("row %q has %d bars, the header %d", r, n, strings.Count(rows[0], "|"))
		}
	}
	if !strings.Contains(rows[0], "| × direct | × chisel | × frp | p50 ms |") || !strings.Contains(rows[5], "| 0.00 | 1.04 | 2.00 | 0.49 |") ||
		!strings.Contains(rows[3], "| 0.00 |  |  | 0.47 |") {
		t.Errorf("markdown table:\n%s", md.String())
	}

	rep.InProcess = true
	if got := rep.peerSummary(); len(got) != 2 || !strings.Contains(got[0], "the whole harness process") {
		t.Errorf("in-process summary %q does not say the CPU and RSS are the whole process's", got)
	}

	// Without peers, no summary and no columns for them.
	rep = &report{Phases: []phaseResult{{Phase: "direct", Concurrency: 1}, {Phase: "tunnel", Concurrency: 1}}}
	if got := rep.peerSummary(); len(got) != 0 {
		t.Errorf("summary without peers: %q", got)
	}
	out.Reset()
	rep.writeText(&out)
	if strings.Contains(out.String(), "× chisel") || strings.Contains(out.String(), "rows:") {
		t.Errorf("report without peers:\n%s", out.String())
	}
}

func TestFindLocaltunnel(t *testing.T) {
	dir := t.TempDir()
	if _, err := findLocaltunnel(dir); err == nil || !strings.Contains(err.Error(), ltServerJS) {
		t.Errorf("an empty directory: %v, want an error that says where the server goes", err)
	}
	for _, p := range []string{ltClientJS, ltServerJS, filepath.Join(ltESM, "index.js")} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := findLocaltunnel(dir)
	if err != nil || l.client != filepath.Join(dir, ltClientJS) || l.server != filepath.Join(dir, ltServerJS) || l.esm != filepath.Join(dir, ltESM) {
		t.Errorf("findLocaltunnel = %+v, %v", l, err)
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
		tun.compareTo(ch)
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

	// With a second peer, measured in every round but one: it has no
	// clause. Measured in every round: a clause beside chisel's in each
	// part of the line.
	var two []phaseResult
	for _, p := range phases {
		if p.Phase == "tunnel" {
			frp := phaseResult{Phase: "frp", Concurrency: 32, Round: p.Round, RPS: p.RPS / 2, P50: p.P50 - 1, CPUTotal: p.CPUTotal * 2}
			if p.Round == 2 {
				frp.RPS = 0 // got nothing through
			}
			p.Versus = slices.Clone(p.Versus)
			p.compareTo(frp)
			two = append(two, frp)
		}
		two = append(two, p)
	}
	rep = &report{Rounds: 3, Phases: two}
	if got := rep.roundsSummary(); !slices.Equal(got, want) {
		t.Errorf("summary with a peer missing from a round:\n%q\nwant\n%q", got, want)
	}
	for i := range two {
		if v := two[i].versus("frp"); v != nil {
			v.Ratio = 2
		}
	}
	want2 := "c=32 over 3 rounds: devhook 7,000–9,000 req/s = 0.70–0.75 × chisel (median 0.73), 2.00 × frp (median 2.00); " +
		"tunnel CPU 116–130 µs = 1.62–1.76 × chisel's (66–80 µs), 0.50 × frp's (232–260 µs); p50 +0.80 to +0.90 ms over chisel's, +1.00 ms over frp's, p99 9.00–11.20 ms; " +
		"peak RSS relay+agent 57.5–59.3 MiB; delivered 300 of 300 sent, 0 duplicates"
	if got := rep.roundsSummary(); len(got) != 1 || got[0] != want2 {
		t.Errorf("summary with two peers:\n%q\nwant\n%q", got, want2)
	}

	// Without chisel: against direct.
	var plain []phaseResult
	for _, p := range phases {
		if p.Phase == "tunnel" {
			p.Versus = nil
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

// The drain phase's receiver counts a run's delivery that arrives after a
// later one of the run, and duplicates apart.
func TestOrderReceiverCountsLateArrivals(t *testing.T) {
	r := &orderReceiver{last: map[string]int{}, seen: map[string]int{}, arrived: make(chan struct{}, 1)}
	for _, d := range []struct {
		run string
		seq int
	}{{"a", 0}, {"b", 0}, {"a", 2}, {"a", 1}, {"b", 1}, {"a", 1}, {"b", 2}} {
		r.add(drainBody(d.run, d.seq))
	}
	n, dupes, late, _ := r.counts()
	if n != 6 || dupes != 1 || late != 1 {
		t.Fatalf("%d delivered, %d duplicates, %d late; want 6, 1, 1", n, dupes, late)
	}
}

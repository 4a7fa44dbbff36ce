package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// TestHarnessCluster runs the cluster phases with tiny numbers: every
// delivery reaches the receiver once at each size, the crashed instance's
// agent is back and nothing answered 2xx or 202 is lost, and every agent
// of the storm is back and answers. It says nothing about speed.
func TestHarnessCluster(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build devhook with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	o := options{n: 300, duration: 30 * time.Second, conc: []int{4}, relays: []int{1, 2}, agents: 2, failover: 3 * time.Second,
		storm: 40, relayTimeout: 2 * time.Second, secret: "whsec_test", stdout: &out, logf: t.Logf}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	rep, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 1 || rep.Phases[0].Phase != "direct" {
		t.Errorf("phases %+v, want one direct phase and no tunnel phase", rep.Phases)
	}
	if len(rep.Scale) != 2 {
		t.Fatalf("%d cluster phases, want one at each of 1 and 2 instances: %+v", len(rep.Scale), rep.Scale)
	}
	for i, s := range rep.Scale {
		if s.Relays != o.relays[i] || s.Agents != o.agents || s.Sent != o.n || s.OK != o.n || s.Delivered != o.n || s.Lost != 0 || s.Duplicates != 0 {
			t.Errorf("cluster of %d: %d agents, sent %d, 2xx %d, delivered %d, lost %d, duplicates %d; want %d delivered once (%s)",
				s.Relays, s.Agents, s.Sent, s.OK, s.Delivered, s.Lost, s.Duplicates, o.n, s.FirstError)
		}
		if s.RPS <= 0 || s.PerInstance != s.RPS/float64(s.Relays) || s.RSSRelay == 0 || s.RSSNATS == 0 || s.CPUCluster != s.CPURelays+s.CPUNATS {
			t.Errorf("cluster of %d: figures %+v", s.Relays, s)
		}
	}
	f := rep.Failover
	if f == nil {
		t.Fatal("no failover phase")
	}
	if f.Relays != 2 || f.Moved != 1 || f.Reconnected != 1 || len(f.ReconnectMS) != 1 || f.ReconnectMaxMS <= 0 {
		t.Errorf("failover: %d instances, %d agents on the crashed one, %d back (%v ms): want 2, 1, 1", f.Relays, f.Moved, f.Reconnected, f.ReconnectMS)
	}
	if f.OK == 0 || f.Lost != 0 || f.Delivered < f.OK {
		t.Errorf("failover: %d answered 2xx or 202, %d delivered, %d lost: want none lost", f.OK, f.Delivered, f.Lost)
	}
	if f.Duplicates != 0 {
		t.Logf("failover: %d duplicates (at least once allows them)", f.Duplicates)
	}
	s := rep.Storm
	if s == nil {
		t.Fatal("no storm phase")
	}
	if s.Connected != o.storm || s.Back != o.storm || s.BackMaxMS <= 0 || s.Probed != o.storm || s.ProbeAnswered != o.storm || s.ProbeLost != 0 {
		t.Errorf("storm: %+v; want all %d connected, back and answering", *s, o.storm)
	}
	took := 0
	for _, in := range s.Instances {
		took += in.Agents
		if in.RSSBefore == 0 || in.RSSAfter == 0 {
			t.Errorf("storm: instance %d's memory not measured: %+v", in.Instance, in)
		}
	}
	if len(s.Instances) != 2 || took != o.storm || s.Instances[1].RSSPeak == 0 {
		t.Errorf("storm: instances %+v, want the %d agents back on the two", s.Instances, o.storm)
	}

	rep.writeText(&out)
	for _, want := range []string{"deliveries/s", "failover: 1 of 1 agents back", ", 0 lost,", "storm: 40 of 40 back", "(crashed, restarted)", "load average "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFanout(t *testing.T) {
	bases := []string{"http://a", "http://b", "http://c"}
	paths := []string{"/c/1/hook", "/c/2/hook", "/c/3/hook", "/c/4/hook", "/c/5/hook", "/c/6/hook"}
	f := newFanout(bases, paths)
	// Every pair of instance and channel once in each len(bases) ×
	// len(paths) requests, and every instance as often.
	seen := map[string]int{}
	per := map[string]int{}
	for i := range 2 * len(bases) * len(paths) {
		u := f.to(i).URL
		seen[u]++
		per[u[:len("http://a")]]++
	}
	if len(seen) != len(bases)*len(paths) {
		t.Errorf("%d pairs of instance and channel reached, want %d: %v", len(seen), len(bases)*len(paths), seen)
	}
	for u, n := range seen {
		if n != 2 {
			t.Errorf("%s reached %d times, want 2", u, n)
		}
	}
	for b, n := range per {
		if n != 2*len(paths) {
			t.Errorf("instance %s got %d requests, want %d", b, n, 2*len(paths))
		}
	}

	// A connection that failed takes its instance out; a timeout does not.
	p := f.plan()
	p.refused(target{URL: "http://b/c/1/hook"}, timeoutError{})
	if f.down[1].Load() {
		t.Error("a timeout marked its instance down")
	}
	p.refused(target{URL: "http://b/c/1/hook"}, errors.New("connection refused"))
	if !f.down[1].Load() || f.down[0].Load() || f.down[2].Load() {
		t.Errorf("down after a refused connection to b: %v %v %v", f.down[0].Load(), f.down[1].Load(), f.down[2].Load())
	}
	for i := range len(bases) * len(paths) {
		if u := f.to(i).URL; strings.HasPrefix(u, "http://b/") {
			t.Fatalf("request %d goes to %s, which is down", i, u)
		}
	}
	// Request 6 was b's: now the next instance's.
	if got := f.to(len(paths)).URL; got != "http://c/c/1/hook" {
		t.Errorf("b's request goes to %s, want c", got)
	}
	p.refused(target{URL: "http://a/c/1/hook"}, errors.New("EOF"))
	p.refused(target{URL: "http://c/c/1/hook"}, errors.New("EOF"))
	if got := f.to(len(paths)).URL; got != "http://b/c/1/hook" {
		t.Errorf("with every instance down, b's request goes to %s, want b", got)
	}
	f.up(0)
	if got := f.to(len(paths)).URL; got != "http://a/c/1/hook" {
		t.Errorf("with a up again, b's request goes to %s, want a", got)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func TestClusterOrder(t *testing.T) {
	c := &cluster{urls: []string{"a", "b", "c"}}
	for home, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}} {
		if got := c.order(home); !slices.Equal(got, want) {
			t.Errorf("order(%d) = %v, want %v", home, got, want)
		}
	}
}

func TestCounterMissing(t *testing.T) {
	c := newCounter()
	p := newPayload()
	for _, i := range []int{0, 2, 2, 5} {
		c.add(p.body(seqID("f", i)), okVerdict())
	}
	c.add(p.body(seqID("g", 1)), okVerdict())
	if n := c.missing("f", []int{0, 1, 2, 5}); n != 1 {
		t.Errorf("missing = %d, want 1 (request 1)", n)
	}
	if n := c.missing("f", nil); n != 0 {
		t.Errorf("missing of none = %d", n)
	}
	if n := c.await(context.Background(), "f", []int{0, 2, 5}, time.Second); n != 0 {
		t.Errorf("await of arrived ones = %d", n)
	}
	start := time.Now()
	if n := c.await(context.Background(), "f", []int{1, 3}, 100*time.Millisecond); n != 2 || time.Since(start) > 5*time.Second {
		t.Errorf("await of absent ones = %d after %s, want 2 at the limit", n, time.Since(start))
	}
	delivered, dupes, _ := c.tally("f")
	if delivered != 3 || dupes != 1 {
		t.Errorf("tally: %d delivered, %d duplicates; want 3 and 1", delivered, dupes)
	}
}

func TestClusterFlags(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", nil, true},
		{"1,2,3", []int{1, 2, 3}, true},
		{" 3 ,", []int{3}, true},
		{"0", nil, false},
		{"17", nil, false},
		{"two", nil, false},
	} {
		got, err := parseRelays(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("parseRelays(%q) = %v, %v", tc.in, got, err)
		}
	}
	base := options{n: 100, conc: []int{32}, relays: []int{1, 2, 3}, agents: 6, failover: 20 * time.Second, storm: 5000}
	for _, tc := range []struct {
		name string
		edit func(*options)
		want string // in the error; empty: none
	}{
		{"defaults", func(*options) {}, ""},
		{"no relays ignores cluster flags", func(o *options) { o.relays, o.agents = nil, 0 }, ""},
		{"with -cluster", func(o *options) { o.cluster = true }, "-cluster"},
		{"with -inproc", func(o *options) { o.inproc = true }, "-inproc"},
		{"with a peer", func(o *options) { o.chisel = "/bin/chisel" }, "-chisel"},
		{"no agents", func(o *options) { o.agents = 0 }, "-agents"},
		{"no concurrency", func(o *options) { o.conc = nil }, "-c"},
		{"no requests", func(o *options) { o.n = 0 }, "-n"},
		{"storm too large", func(o *options) { o.storm = 1 << 20 }, "-storm"},
		{"negative failover", func(o *options) { o.failover = -time.Second }, "-failover"},
		{"negative relay timeout", func(o *options) { o.relayTimeout = -time.Second }, "-relay-timeout"},
	} {
		o := base
		tc.edit(&o)
		err := o.check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	if got := (options{relayTimeout: 2 * time.Second}).relayArgs(); !slices.Equal(got, []string{"--timeout", "2s"}) {
		t.Errorf("relayArgs = %q", got)
	}
	if got := (options{}).relayArgs(); got != nil {
		t.Errorf("relayArgs without -relay-timeout = %q", got)
	}
}

func TestClusterReport(t *testing.T) {
	rep := &report{
		Scale: []scaleResult{
			{Relays: 1, Agents: 6, Concurrency: 32, Sent: 100, OK: 100, Delivered: 100, RPS: 3000, PerInstance: 3000, CPURelays: 150, CPUCluster: 150},
			{Relays: 3, Agents: 6, Concurrency: 32, Sent: 100, OK: 100, Queued: 2, Delivered: 100, RPS: 2400, PerInstance: 800, CPURelays: 200, CPUNATS: 40, CPUCluster: 240},
		},
		Failover: &failoverResult{Relays: 3, Agents: 6, Moved: 2, Reconnected: 2, ReconnectMS: []float64{4, 9}, ReconnectMaxMS: 9, Sent: 10, OK: 8, Failed: 2, Refused: 2, Delivered: 9},
		Storm: &stormResult{Relays: 3, Agents: 5000, Connected: 5000, Back: 5000, BackMaxMS: 900,
			Instances: []stormInstance{{Instance: 0, RSSBefore: 200, RSSAfter: 20}, {Instance: 1, Agents: 5000, RSSBefore: 20, RSSPeak: 250, RSSAfter: 230}, {Instance: 2, RSSBefore: 20, RSSPeak: 21, RSSAfter: 21}}},
	}
	var text bytes.Buffer
	rep.writeText(&text)
	for _, want := range []string{"relays+NATS µs", "3,000", "2,400", "100 (2)", "failover: 2 of 2 agents back on another instance, the last 9 ms after the crash (each: 4, 9 ms",
		"8 answered 2xx", "2 failed (2 without an answer)", "storm: 5000 of 5000 back", "0 (crashed, restarted)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	// Markdown: every row of a table as wide as its header.
	var md bytes.Buffer
	rep.writeTable(&md, true)
	var tables [][]string
	prev := false
	for l := range strings.Lines(md.String()) {
		row := strings.HasPrefix(l, "| ")
		if row && !prev {
			tables = append(tables, nil)
		}
		if row {
			tables[len(tables)-1] = append(tables[len(tables)-1], l)
		}
		prev = row
	}
	if len(tables) != 2 || len(tables[0]) != 4 || len(tables[1]) != 5 {
		t.Fatalf("markdown tables %q, want the cluster phases' (header, rule, 2 rows) and the storm's (header, rule, 3 rows)", tables)
	}
	for _, tb := range tables {
		for _, r := range tb {
			if strings.Count(r, "|") != strings.Count(tb[0], "|") {
				t.Errorf("row %q is not as wide as its header %q", r, tb[0])
			}
		}
	}
	if !strings.Contains(md.String(), "- failover: ") || !strings.Contains(md.String(), "- storm: ") {
		t.Errorf("markdown lacks the failover and storm lines:\n%s", md.String())
	}
}

func okVerdict() devhook.Verdict { return devhook.Verdict{Result: devhook.VerdictOK} }

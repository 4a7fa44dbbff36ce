package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// report is one run's figures.
type report struct {
	Command   string        `json:"command"`
	Started   time.Time     `json:"started"`
	CPUs      int           `json:"cpus"`
	GoVersion string        `json:"go_version"`
	OS        string        `json:"os"`
	N         int           `json:"n"`
	Duration  string        `json:"duration"`
	FileLimit uint64        `json:"file_limit"`
	InProcess bool          `json:"in_process,omitempty"`
	Cluster   string        `json:"cluster,omitempty"` // how the cluster phases ran
	Rounds    int           `json:"rounds,omitempty"`  // load phases run this many times (above 1)
	Peers     []peerInfo    `json:"peers,omitempty"`   // the other tunnels the run compared with
	Phases    []phaseResult `json:"phases"`
	// The cluster phases (-relays).
	Scale    []scaleResult   `json:"scale_out,omitempty"`
	Failover *failoverResult `json:"failover,omitempty"`
	Storm    *stormResult    `json:"storm,omitempty"`
	// The machine's load average (1, 5 and 15 minutes) as the run
	// started and as it ended: the machine is shared.
	LoadBefore string       `json:"loadavg_before,omitempty"`
	LoadAfter  string       `json:"loadavg_after,omitempty"`
	List       *listResult  `json:"list,omitempty"`
	Idle       *idleResult  `json:"idle,omitempty"`
	Drain      *drainResult `json:"drain,omitempty"`
	// Goroutines in this process before and after the tunnel phases
	// (in-process runs only): a growing count is a leak.
	GoroutinesBefore int `json:"goroutines_before,omitempty"`
	GoroutinesAfter  int `json:"goroutines_after,omitempty"`
}

// phaseResult is one load phase: direct, through a peer (chisel, frp or
// localtunnel), or through the tunnel. In a peer's phase the relay's
// fields are the peer's server's and the agent's its client's.
type phaseResult struct {
	Phase         string  `json:"phase"` // direct, chisel, frp, localtunnel or tunnel
	Concurrency   int     `json:"concurrency"`
	Round         int     `json:"round,omitempty"` // with -rounds: which, from 1
	Sent          int     `json:"sent"`
	OK            int     `json:"ok"` // 2xx answers to the sender
	Failed        int     `json:"failed"`
	FirstError    string  `json:"first_error,omitempty"`
	Delivered     int     `json:"delivered"` // distinct ids at the receiver
	Duplicates    int     `json:"duplicates"`
	BadSignatures int     `json:"bad_signatures"` // receiver's verdict failed (cumulative)
	RPS           float64 `json:"rps"`
	Ratio         float64 `json:"ratio_to_direct,omitempty"`
	P50           float64 `json:"p50_ms"`
	P99           float64 `json:"p99_ms"`
	Max           float64 `json:"max_ms"`
	Seconds       float64 `json:"seconds"`
	RSSRelay      float64 `json:"peak_rss_relay_mib,omitempty"`
	RSSAgent      float64 `json:"peak_rss_agent_mib,omitempty"`
	// Peak RssAnon: RSS without the file pages bbolt has mapped, which
	// the kernel can drop at will.
	AnonRelay  float64 `json:"peak_anon_relay_mib,omitempty"`
	AnonAgent  float64 `json:"peak_anon_agent_mib,omitempty"`
	AgentLines int64   `json:"agent_output_lines,omitempty"`
	// CPU time per request, in microseconds, used by the relay and the
	// agent processes (in-process runs: the whole process, in CPURelay).
	CPURelay float64 `json:"cpu_relay_us_per_request,omitempty"`
	CPUAgent float64 `json:"cpu_agent_us_per_request,omitempty"`
	// CPURelay + CPUAgent: the whole tunnel's (or peer's) CPU time per
	// request.
	CPUTotal float64 `json:"cpu_us_per_request,omitempty"`

	// The tunnel compared with each peer's phase at the same concurrency
	// and round, in the order of the phases: tunnel phases of runs with
	// peers only.
	Versus []peerComparison `json:"versus,omitempty"`
}

// peerComparison is a tunnel phase measured against one peer's phase at
// the same concurrency.
type peerComparison struct {
	Peer    string  `json:"peer"`               // chisel, frp or localtunnel
	Ratio   float64 `json:"ratio"`              // req/s: devhook / the peer's; 0 when the peer's is 0
	RPS     float64 `json:"rps"`                // the peer's req/s
	P50Diff float64 `json:"p50_minus_peer_ms"`  // devhook's p50 − the peer's
	P50     float64 `json:"p50_ms"`             // the peer's p50
	P99     float64 `json:"p99_ms"`             // the peer's p99
	CPU     float64 `json:"cpu_us_per_request"` // the peer's server + client
	RSS     float64 `json:"peak_rss_mib"`       // the peer's server + client
}

// compareTo measures the tunnel phase p against the peer's phase peer at
// the same concurrency.
func (p *phaseResult) compareTo(peer phaseResult) {
	c := peerComparison{Peer: peer.Phase, RPS: peer.RPS, P50Diff: p.P50 - peer.P50, P50: peer.P50, P99: peer.P99,
		CPU: peer.CPUTotal, RSS: peer.RSSRelay + peer.RSSAgent}
	if peer.RPS > 0 {
		c.Ratio = p.RPS / peer.RPS
	}
	p.Versus = append(p.Versus, c)
}

// versus is p's comparison with the peer named name, or nil.
func (p *phaseResult) versus(name string) *peerComparison {
	for i := range p.Versus {
		if p.Versus[i].Peer == name {
			return &p.Versus[i]
		}
	}
	return nil
}

// peerNames is the peers whose phases the run has, in their phases' order.
func (r *report) peerNames() []string {
	var names []string
	for _, p := range r.Phases {
		if p.Phase != "direct" && p.Phase != "tunnel" && !slices.Contains(names, p.Phase) {
			names = append(names, p.Phase)
		}
	}
	return names
}

// listResult is the inspector's list API at a large store.
type listResult struct {
	Stored   int     `json:"stored"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed"`
	Items    int     `json:"items_first_page"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	FillSecs float64 `json:"fill_seconds"`
	RSSAgent float64 `json:"rss_agent_mib"`
}

// idleResult is one relay holding many idle agent connections.
type idleResult struct {
	Wanted      int     `json:"wanted"`
	Opened      int     `json:"channels_opened"`
	Connected   int     `json:"connected"`
	FirstError  string  `json:"first_error,omitempty"`
	OpenSecs    float64 `json:"open_seconds"`
	ConnectSecs float64 `json:"connect_seconds"`
	BaseRSS     float64 `json:"relay_rss_before_mib"`
	RSS         float64 `json:"relay_rss_mib"`
	PeakRSS     float64 `json:"relay_peak_rss_mib"`
	PerConnKiB  float64 `json:"kib_per_connection"`
}

func (r *report) writeText(w io.Writer) {
	fmt.Fprintf(w, "\n%s, %d CPUs, %s; %d requests per phase, at most %s each\n", r.OS, r.CPUs, r.GoVersion, r.N, r.Duration)
	if r.LoadBefore != "" {
		fmt.Fprintf(w, "load average %s as the run started, %s as it ended\n", r.LoadBefore, r.LoadAfter)
	}
	if r.Cluster != "" {
		fmt.Fprintln(w, r.Cluster)
	}
	fmt.Fprintln(w)
	r.writeTable(w, false)
	if r.GoroutinesAfter > 0 {
		fmt.Fprintf(w, "\ngoroutines in the process: %d before the tunnel phases, %d after\n", r.GoroutinesBefore, r.GoroutinesAfter)
	}
	for _, p := range r.Phases {
		if p.FirstError != "" {
			fmt.Fprintf(w, "%s c=%d: first failure: %s\n", p.Phase, p.Concurrency, p.FirstError)
		}
	}
}

// writeTable prints the figures as aligned text, or as markdown.
func (r *report) writeTable(w io.Writer, md bool) {
	row := func(tw io.Writer, cells ...string) {
		if md {
			fmt.Fprintf(tw, "| %s |\n", strings.Join(cells, " | "))
		} else {
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
	}
	var out io.Writer = w
	var tw *tabwriter.Writer
	if !md {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		out = tw
	}
	peers := r.peerNames()
	if len(r.Phases) > 0 {
		head := []string{"phase", "conc", "sent", "2xx", "delivered", "dup", "req/s", "× direct"}
		for _, name := range peers {
			head = append(head, "× "+name)
		}
		head = append(head, "p50 ms", "p99 ms", "max ms",
			"relay RSS (anon) MiB", "agent RSS (anon) MiB", "relay CPU µs/req", "agent CPU µs/req", "tunnel CPU µs/req")
		row(out, head...)
		if md {
			rule := []string{"---"}
			for range head[1:] {
				rule = append(rule, "--:")
			}
			row(out, rule...)
		}
		for _, p := range r.Phases {
			ratio, relay, agent, crelay, cagent, ctotal := "", "", "", "", "", ""
			if p.Phase != "direct" {
				ratio = fmt.Sprintf("%.2f", p.Ratio)
				relay = fmt.Sprintf("%.1f (%.1f)", p.RSSRelay, p.AnonRelay)
				agent = fmt.Sprintf("%.1f (%.1f)", p.RSSAgent, p.AnonAgent)
				crelay, cagent = fmt.Sprintf("%.0f", p.CPURelay), fmt.Sprintf("%.0f", p.CPUAgent)
				ctotal = fmt.Sprintf("%.0f", p.CPUTotal)
			}
			name := p.Phase
			if p.Round > 0 {
				name = fmt.Sprintf("%s #%d", p.Phase, p.Round)
			}
			cells := []string{name, fmt.Sprint(p.Concurrency), fmt.Sprint(p.Sent), fmt.Sprint(p.OK), fmt.Sprint(p.Delivered),
				fmt.Sprint(p.Duplicates), fmt.Sprintf("%.0f", p.RPS), ratio}
			for _, peer := range peers {
				vs := ""
				if c := p.versus(peer); c != nil {
					vs = fmt.Sprintf("%.2f", c.Ratio)
				}
				cells = append(cells, vs)
			}
			row(out, append(cells, fmt.Sprintf("%.2f", p.P50),
				fmt.Sprintf("%.2f", p.P99), fmt.Sprintf("%.1f", p.Max), relay, agent, crelay, cagent, ctotal)...)
		}
	}
	if tw != nil {
		tw.Flush()
	}
	if len(peers) > 0 {
		fmt.Fprintln(w)
		if md {
			fmt.Fprintf(w, "In %s rows, the relay columns are that tunnel's server and the agent columns its client.\n\n", orList(peers))
		} else {
			fmt.Fprintf(w, "%s rows: relay columns are that tunnel's server, agent columns its client\n", orList(peers))
		}
		for _, info := range r.Peers {
			l := info.Name
			if info.Version != "" {
				l += " " + info.Version
			}
			l += ": " + info.Mode
			if md {
				l = "- " + l
			}
			fmt.Fprintln(w, l)
		}
	}
	if lines := r.peerSummary(); len(lines) > 0 {
		fmt.Fprintln(w)
		for _, l := range lines {
			if md {
				l = "- " + l
			}
			fmt.Fprintln(w, l)
		}
	}
	if lines := r.roundsSummary(); len(lines) > 0 {
		fmt.Fprintln(w)
		for _, l := range lines {
			if md {
				l = "- " + l
			}
			fmt.Fprintln(w, l)
		}
	}
	r.writeCluster(w, md)
	if l := r.List; l != nil {
		if md {
			fmt.Fprintf(w, "\n| inspector list, first page of %d | at %d stored | p50 %.2f ms | p99 %.2f ms | max %.2f ms | agent RSS %.1f MiB |\n|---|---|---|---|---|---|\n",
				l.Items, l.Stored, l.P50, l.P99, l.Max, l.RSSAgent)
		} else {
			fmt.Fprintf(w, "\ninspector GET /api/deliveries (first page, %d items) at %d stored: p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d requests (%d failed); agent RSS %.1f MiB; store filled in %.1fs\n",
				l.Items, l.Stored, l.P50, l.P99, l.Max, l.Requests, l.Failed, l.RSSAgent, l.FillSecs)
		}
	}
	r.writeDrain(w, md)
	if i := r.Idle; i != nil {
		if md {
			fmt.Fprintf(w, "\n| idle agents connected | relay RSS before | relay RSS held | relay peak RSS | per connection |\n|---|---|---|---|---|\n| %d of %d | %.1f MiB | %.1f MiB | %.1f MiB | %.1f KiB |\n",
				i.Connected, i.Wanted, i.BaseRSS, i.RSS, i.PeakRSS, i.PerConnKiB)
		} else {
			fmt.Fprintf(w, "\nidle: %d of %d agents connected to one relay (channels opened in %.1fs, connected in %.1fs); relay RSS %.1f MiB before, %.1f MiB holding them, peak %.1f MiB: %.1f KiB per connection\n",
				i.Connected, i.Wanted, i.OpenSecs, i.ConnectSecs, i.BaseRSS, i.RSS, i.PeakRSS, i.PerConnKiB)
			if i.FirstError != "" {
				fmt.Fprintf(w, "idle: first failure: %s\n", i.FirstError)
			}
		}
	}
}

// orList joins names as "a", "a and b" or "a, b and c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// peerSummary is, for a run with peers, one line per tunnel phase and
// peer: the tunnel phase against that peer's phase, from the tunnel
// phase's fields.
func (r *report) peerSummary() []string {
	var out []string
	for _, p := range r.Phases {
		if p.Phase != "tunnel" {
			continue
		}
		for _, c := range p.Versus {
			out = append(out, r.versusLine(p, c))
		}
	}
	return out
}

// versusLine is the tunnel phase p against one peer's, c.
func (r *report) versusLine(p phaseResult, c peerComparison) string {
	ratio := "n/a"
	if c.Ratio > 0 {
		ratio = fmt.Sprintf("%.2f", c.Ratio)
	}
	cpu, rss := "tunnel CPU", fmt.Sprintf("peak RSS relay+agent %.1f MiB", p.RSSRelay+p.RSSAgent)
	switch {
	case r.InProcess:
		cpu = "tunnel CPU (the whole harness process)"
		rss = fmt.Sprintf("peak RSS of the whole harness process %.1f MiB", p.RSSRelay+p.RSSAgent)
	case r.Cluster != "":
		cpu = "tunnel CPU (the senders' relay and the agent; not the agent's relay nor NATS)"
		rss = fmt.Sprintf("peak RSS senders' relay+agent %.1f MiB", p.RSSRelay+p.RSSAgent)
	}
	n := c.Peer
	return fmt.Sprintf("c=%d: devhook %s req/s = %s × %s (%s); p50 %.2f ms vs %s %.2f ms (%+.2f ms), p99 %.2f ms vs %s %.2f ms; %s %.0f µs vs %s %.0f µs per request; %s vs %s server+client %.1f MiB",
		p.Concurrency, thousands(p.RPS), ratio, n, thousands(c.RPS), p.P50, n, c.P50, c.P50Diff, p.P99, n, c.P99,
		cpu, p.CPUTotal, n, c.CPU, rss, n, c.RSS)
}

// roundsSummary is, for a run of several rounds, one line per concurrency:
// the range of each of the tunnel's figures over the rounds, and against
// each peer's in the same round, for the peers measured in every round.
func (r *report) roundsSummary() []string {
	if r.Rounds < 2 {
		return nil
	}
	var concs []int
	byConc := map[int][]phaseResult{}
	for _, p := range r.Phases {
		if p.Phase != "tunnel" {
			continue
		}
		if _, ok := byConc[p.Concurrency]; !ok {
			concs = append(concs, p.Concurrency)
		}
		byConc[p.Concurrency] = append(byConc[p.Concurrency], p)
	}
	cpu := "tunnel CPU"
	if r.InProcess {
		cpu = "CPU of the whole harness process"
	}
	var out []string
	for _, c := range concs {
		ps := byConc[c]
		var rps, direct, cpus, p50, p99, rss []float64
		sent, delivered, dups := 0, 0, 0
		for _, p := range ps {
			rps, direct, cpus = append(rps, p.RPS), append(direct, p.Ratio), append(cpus, p.CPUTotal)
			p50, p99, rss = append(p50, p.P50), append(p99, p.P99), append(rss, p.RSSRelay+p.RSSAgent)
			sent, delivered, dups = sent+p.Sent, delivered+p.Delivered, dups+p.Duplicates
		}
		var ratios, cpuRatios, p50s []string // one clause per peer
		for _, name := range r.peerNames() {
			var vs, cpuRatio, peerCPU, p50Diff []float64
			for _, p := range ps {
				v := p.versus(name)
				if v == nil || v.Ratio == 0 || v.CPU == 0 {
					break
				}
				vs, p50Diff = append(vs, v.Ratio), append(p50Diff, v.P50Diff)
				cpuRatio, peerCPU = append(cpuRatio, p.CPUTotal/v.CPU), append(peerCPU, v.CPU)
			}
			if len(vs) < len(ps) {
				continue // not measured in every round
			}
			ratios = append(ratios, fmt.Sprintf("%s × %s (median %.2f)", spread(vs, fixed2), name, median(vs)))
			cpuRatios = append(cpuRatios, fmt.Sprintf("%s × %s's (%s µs)", spread(cpuRatio, fixed2), name, spread(peerCPU, fixed0)))
			p50s = append(p50s, fmt.Sprintf("%s ms over %s's", spread(p50Diff, signed2), name))
		}
		line := fmt.Sprintf("c=%d over %d rounds: devhook %s req/s", c, len(ps), spread(rps, thousands))
		if len(ratios) > 0 {
			line += fmt.Sprintf(" = %s; %s %s µs = %s; p50 %s", strings.Join(ratios, ", "), cpu, spread(cpus, fixed0),
				strings.Join(cpuRatios, ", "), strings.Join(p50s, ", "))
		} else {
			line += fmt.Sprintf(" = %s × direct; %s %s µs; p50 %s ms", spread(direct, fixed2), cpu, spread(cpus, fixed0), spread(p50, fixed2))
		}
		line += fmt.Sprintf(", p99 %s ms; peak RSS relay+agent %s MiB; delivered %d of %d sent, %d duplicates",
			spread(p99, fixed2), spread(rss, fixed1), delivered, sent, dups)
		out = append(out, line)
	}
	return out
}

func fixed0(f float64) string  { return strconv.FormatFloat(f, 'f', 0, 64) }
func fixed1(f float64) string  { return strconv.FormatFloat(f, 'f', 1, 64) }
func fixed2(f float64) string  { return strconv.FormatFloat(f, 'f', 2, 64) }
func signed2(f float64) string { return fmt.Sprintf("%+.2f", f) }

// spread is "lo–hi" of vals as format writes them, or the one value when
// they all write the same.
func spread(vals []float64, format func(float64) string) string {
	if len(vals) == 0 {
		return "n/a"
	}
	lo, hi := slices.Min(vals), slices.Max(vals)
	if format(lo) == format(hi) {
		return format(lo)
	}
	if format(lo)[0] == '+' || format(lo)[0] == '-' {
		return format(lo) + " to " + format(hi)
	}
	return format(lo) + "–" + format(hi)
}

// median of vals, which it does not change; 0 for none.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vals))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// thousands formats f rounded to a whole number, with commas between
// groups of three digits: 8900.4 is "8,900".
func thousands(f float64) string {
	s := strconv.FormatFloat(math.Round(f), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// save writes the report to path: JSON when path ends in .json, else
// markdown.
func (r *report) save(path string) error {
	var b bytes.Buffer
	if strings.HasSuffix(path, ".json") {
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(&b, "`%s` — %s, %d CPUs, %s, %s\n\n", r.Command, r.OS, r.CPUs, r.GoVersion, r.Started.Format(time.DateOnly))
		if r.LoadBefore != "" {
			fmt.Fprintf(&b, "Load average %s as the run started, %s as it ended.\n\n", r.LoadBefore, r.LoadAfter)
		}
		if r.Cluster != "" {
			fmt.Fprintf(&b, "%s.\n\n", r.Cluster)
		}
		r.writeTable(&b, true)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

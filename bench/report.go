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
	Phases    []phaseResult `json:"phases"`
	List      *listResult   `json:"list,omitempty"`
	Idle      *idleResult   `json:"idle,omitempty"`
	// Goroutines in this process before and after the tunnel phases
	// (in-process runs only): a growing count is a leak.
	GoroutinesBefore int `json:"goroutines_before,omitempty"`
	GoroutinesAfter  int `json:"goroutines_after,omitempty"`
}

// phaseResult is one load phase: direct, through chisel, or through the
// tunnel. In a chisel phase the relay's fields are the chisel server's
// and the agent's the chisel client's.
type phaseResult struct {
	Phase         string  `json:"phase"` // direct, chisel or tunnel
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
	// CPURelay + CPUAgent: the whole tunnel's (or chisel's) CPU time per
	// request.
	CPUTotal float64 `json:"cpu_us_per_request,omitempty"`

	// The tunnel compared with chisel at the same concurrency: tunnel
	// phases of runs with --chisel only, nil (and no JSON fields) else.
	*ChiselComparison
}

// ChiselComparison is a tunnel phase measured against the chisel phase at
// the same concurrency.
type ChiselComparison struct {
	RatioChisel float64 `json:"ratio_to_chisel"`           // req/s: devhook / chisel
	ChiselRPS   float64 `json:"chisel_rps"`                // chisel's req/s
	P50Diff     float64 `json:"p50_minus_chisel_ms"`       // devhook p50 − chisel p50
	ChiselP50   float64 `json:"chisel_p50_ms"`             // chisel's p50
	ChiselP99   float64 `json:"chisel_p99_ms"`             // chisel's p99
	ChiselCPU   float64 `json:"chisel_cpu_us_per_request"` // chisel server + client
	ChiselRSS   float64 `json:"chisel_peak_rss_mib"`       // chisel server + client
}

// compareToChisel measures the tunnel phase p against the chisel phase ch
// at the same concurrency.
func (p *phaseResult) compareToChisel(ch phaseResult) {
	c := &ChiselComparison{ChiselRPS: ch.RPS, P50Diff: p.P50 - ch.P50, ChiselP50: ch.P50, ChiselP99: ch.P99,
		ChiselCPU: ch.CPUTotal, ChiselRSS: ch.RSSRelay + ch.RSSAgent}
	if ch.RPS > 0 {
		c.RatioChisel = p.RPS / ch.RPS
	}
	p.ChiselComparison = c
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
	fmt.Fprintf(w, "\n%s, %d CPUs, %s; %d requests per phase, at most %s each\n\n", r.OS, r.CPUs, r.GoVersion, r.N, r.Duration)
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
	if len(r.Phases) > 0 {
		row(out, "phase", "conc", "sent", "2xx", "delivered", "dup", "req/s", "× direct", "× chisel", "p50 ms", "p99 ms", "max ms",
			"relay RSS (anon) MiB", "agent RSS (anon) MiB", "relay CPU µs/req", "agent CPU µs/req", "tunnel CPU µs/req")
		if md {
			row(out, "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:")
		}
		for _, p := range r.Phases {
			ratio, vsChisel, relay, agent, crelay, cagent, ctotal := "", "", "", "", "", "", ""
			if p.Phase != "direct" {
				ratio = fmt.Sprintf("%.2f", p.Ratio)
				relay = fmt.Sprintf("%.1f (%.1f)", p.RSSRelay, p.AnonRelay)
				agent = fmt.Sprintf("%.1f (%.1f)", p.RSSAgent, p.AnonAgent)
				crelay, cagent = fmt.Sprintf("%.0f", p.CPURelay), fmt.Sprintf("%.0f", p.CPUAgent)
				ctotal = fmt.Sprintf("%.0f", p.CPUTotal)
			}
			if p.ChiselComparison != nil {
				vsChisel = fmt.Sprintf("%.2f", p.RatioChisel)
			}
			name := p.Phase
			if p.Round > 0 {
				name = fmt.Sprintf("%s #%d", p.Phase, p.Round)
			}
			row(out, name, fmt.Sprint(p.Concurrency), fmt.Sprint(p.Sent), fmt.Sprint(p.OK), fmt.Sprint(p.Delivered),
				fmt.Sprint(p.Duplicates), fmt.Sprintf("%.0f", p.RPS), ratio, vsChisel, fmt.Sprintf("%.2f", p.P50),
				fmt.Sprintf("%.2f", p.P99), fmt.Sprintf("%.1f", p.Max), relay, agent, crelay, cagent, ctotal)
		}
	}
	if tw != nil {
		tw.Flush()
	}
	if lines := r.chiselSummary(); len(lines) > 0 {
		fmt.Fprintln(w)
		if md {
			fmt.Fprintln(w, "In chisel rows, relay is the chisel server and agent the chisel client.")
			fmt.Fprintln(w)
		} else {
			fmt.Fprintln(w, "chisel rows: relay columns are the chisel server, agent columns the chisel client")
		}
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
	if l := r.List; l != nil {
		if md {
			fmt.Fprintf(w, "\n| inspector list, first page of %d | at %d stored | p50 %.2f ms | p99 %.2f ms | max %.2f ms | agent RSS %.1f MiB |\n|---|---|---|---|---|---|\n",
				l.Items, l.Stored, l.P50, l.P99, l.Max, l.RSSAgent)
		} else {
			fmt.Fprintf(w, "\ninspector GET /api/deliveries (first page, %d items) at %d stored: p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d requests (%d failed); agent RSS %.1f MiB; store filled in %.1fs\n",
				l.Items, l.Stored, l.P50, l.P99, l.Max, l.Requests, l.Failed, l.RSSAgent, l.FillSecs)
		}
	}
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

// chiselSummary is one line per concurrency of a run with --chisel: the
// tunnel phase against chisel, from the tunnel phase's fields.
func (r *report) chiselSummary() []string {
	var out []string
	for _, p := range r.Phases {
		c := p.ChiselComparison
		if p.Phase != "tunnel" || c == nil {
			continue
		}
		ratio := "n/a"
		if c.RatioChisel > 0 {
			ratio = fmt.Sprintf("%.2f", c.RatioChisel)
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
		out = append(out, fmt.Sprintf("c=%d: devhook %s req/s = %s × chisel (%s); p50 %.2f ms vs chisel %.2f ms (%+.2f ms), p99 %.2f ms vs chisel %.2f ms; %s %.0f µs vs chisel %.0f µs per request; %s vs chisel server+client %.1f MiB",
			p.Concurrency, thousands(p.RPS), ratio, thousands(c.ChiselRPS), p.P50, c.ChiselP50, c.P50Diff, p.P99, c.ChiselP99,
			cpu, p.CPUTotal, c.ChiselCPU, rss, c.ChiselRSS))
	}
	return out
}

// roundsSummary is, for a run of several rounds, one line per concurrency:
// the range of each of the tunnel's figures over the rounds, and against
// chisel's in the same round when there is a chisel phase.
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
		var rps, direct, vsChisel, cpus, cpuRatio, chiselCPU, p50, p50Diff, p99, rss []float64
		sent, delivered, dups := 0, 0, 0
		withChisel := true
		for _, p := range ps {
			rps, direct, cpus = append(rps, p.RPS), append(direct, p.Ratio), append(cpus, p.CPUTotal)
			p50, p99, rss = append(p50, p.P50), append(p99, p.P99), append(rss, p.RSSRelay+p.RSSAgent)
			sent, delivered, dups = sent+p.Sent, delivered+p.Delivered, dups+p.Duplicates
			ch := p.ChiselComparison
			if ch == nil || ch.RatioChisel == 0 || ch.ChiselCPU == 0 {
				withChisel = false
				continue
			}
			vsChisel, p50Diff = append(vsChisel, ch.RatioChisel), append(p50Diff, ch.P50Diff)
			cpuRatio, chiselCPU = append(cpuRatio, p.CPUTotal/ch.ChiselCPU), append(chiselCPU, ch.ChiselCPU)
		}
		line := fmt.Sprintf("c=%d over %d rounds: devhook %s req/s", c, len(ps), spread(rps, thousands))
		if withChisel {
			line += fmt.Sprintf(" = %s × chisel (median %.2f); %s %s µs = %s × chisel's (%s µs); p50 %s ms over chisel's",
				spread(vsChisel, fixed2), median(vsChisel), cpu, spread(cpus, fixed0), spread(cpuRatio, fixed2), spread(chiselCPU, fixed0), spread(p50Diff, signed2))
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
		r.writeTable(&b, true)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	Phases    []phaseResult `json:"phases"`
	List      *listResult   `json:"list,omitempty"`
	Idle      *idleResult   `json:"idle,omitempty"`
	// Goroutines in this process before and after the tunnel phases
	// (in-process runs only): a growing count is a leak.
	GoroutinesBefore int `json:"goroutines_before,omitempty"`
	GoroutinesAfter  int `json:"goroutines_after,omitempty"`
}

// phaseResult is one load phase: direct or through the tunnel.
type phaseResult struct {
	Phase         string  `json:"phase"` // direct or tunnel
	Concurrency   int     `json:"concurrency"`
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
		row(out, "phase", "conc", "sent", "2xx", "delivered", "dup", "req/s", "× direct", "p50 ms", "p99 ms", "max ms", "relay RSS (anon) MiB", "agent RSS (anon) MiB", "relay CPU µs/req", "agent CPU µs/req")
		if md {
			row(out, "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:")
		}
		for _, p := range r.Phases {
			ratio, relay, agent, crelay, cagent := "", "", "", "", ""
			if p.Phase == "tunnel" {
				ratio = fmt.Sprintf("%.2f", p.Ratio)
				relay = fmt.Sprintf("%.1f (%.1f)", p.RSSRelay, p.AnonRelay)
				agent = fmt.Sprintf("%.1f (%.1f)", p.RSSAgent, p.AnonAgent)
				crelay, cagent = fmt.Sprintf("%.0f", p.CPURelay), fmt.Sprintf("%.0f", p.CPUAgent)
			}
			row(out, p.Phase, fmt.Sprint(p.Concurrency), fmt.Sprint(p.Sent), fmt.Sprint(p.OK), fmt.Sprint(p.Delivered),
				fmt.Sprint(p.Duplicates), fmt.Sprintf("%.0f", p.RPS), ratio, fmt.Sprintf("%.2f", p.P50),
				fmt.Sprintf("%.2f", p.P99), fmt.Sprintf("%.1f", p.Max), relay, agent, crelay, cagent)
		}
	}
	if tw != nil {
		tw.Flush()
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

package main

// The cluster phases' figures (-relays) and how the report prints them.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// scaleResult is one cluster phase: deliveries spread over the channels
// of Agents agents and over Relays instances.
type scaleResult struct {
	Relays      int     `json:"relays"`
	Agents      int     `json:"agents"`
	Concurrency int     `json:"concurrency"`
	Sent        int     `json:"sent"`
	OK          int     `json:"ok"`     // 2xx answers, 202 included
	Queued      int     `json:"queued"` // 202: queued, no agent at that moment
	Failed      int     `json:"failed"`
	FirstError  string  `json:"first_error,omitempty"`
	Delivered   int     `json:"delivered"` // distinct ids at the receiver
	Duplicates  int     `json:"duplicates"`
	Lost        int     `json:"lost"` // answered 2xx or 202, never at the receiver
	RPS         float64 `json:"rps"`
	PerInstance float64 `json:"rps_per_instance"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	Max         float64 `json:"max_ms"`
	Seconds     float64 `json:"seconds"`
	// CPU time per delivery, in microseconds: all relay instances,
	// NATS, the two together (the cluster's cost), the agents, and the
	// harness (senders and receiver).
	CPURelays  float64 `json:"cpu_relays_us_per_delivery"`
	CPUNATS    float64 `json:"cpu_nats_us_per_delivery"`
	CPUCluster float64 `json:"cpu_cluster_us_per_delivery"`
	CPUAgents  float64 `json:"cpu_agents_us_per_delivery"`
	CPUHarness float64 `json:"cpu_harness_us_per_delivery"`
	// Cores is the CPU time of every process measured over the phase's
	// wall time: near the machine's CPU count, the machine is the limit.
	Cores    float64 `json:"cores_busy"`
	RSSRelay float64 `json:"peak_rss_relay_mib"` // the largest instance's peak
	RSSNATS  float64 `json:"peak_rss_nats_mib"`
}

// failoverResult is the failover phase: an instance crashed under load.
type failoverResult struct {
	Relays            int       `json:"relays"`
	Agents            int       `json:"agents"`
	Crashed           int       `json:"crashed_instance"`
	Moved             int       `json:"agents_on_it"`
	Reconnected       int       `json:"agents_back"`
	ReconnectMS       []float64 `json:"reconnect_ms"` // each agent's, from the crash, sorted
	ReconnectMaxMS    float64   `json:"reconnect_max_ms"`
	DownMaxMS         float64   `json:"agent_down_max_ms"` // as the agents measured it
	QueuedOnReconnect int       `json:"queued_on_reconnect"`
	Concurrency       int       `json:"concurrency"`
	LoadSecs          float64   `json:"load_seconds"`
	CrashAtSecs       float64   `json:"crash_at_seconds"`
	Sent              int       `json:"sent"`
	OK                int       `json:"ok"` // 2xx, 202 included: the relay took them
	Queued            int       `json:"queued"`
	Failed            int       `json:"failed"`
	Refused           int       `json:"no_answer"` // of Failed: the connection failed (the crashed instance)
	FirstError        string    `json:"first_error,omitempty"`
	Delivered         int       `json:"delivered"`
	Lost              int       `json:"lost"`
	Duplicates        int       `json:"duplicates"`
	DrainSecs         float64   `json:"drain_seconds"` // after the load, until every answered delivery arrived
	P50               float64   `json:"p50_ms"`
	P99               float64   `json:"p99_ms"`
	Max               float64   `json:"max_ms"`
	Slow              int       `json:"over_1s"` // requests answered after more than a second
}

// stormResult is the storm phase: many agents dropped at once.
type stormResult struct {
	Relays        int             `json:"relays"`
	Agents        int             `json:"agents"`
	Connected     int             `json:"connected"`
	ConnectSecs   float64         `json:"connect_seconds"`
	FirstError    string          `json:"first_error,omitempty"`
	RestartMS     float64         `json:"restart_ms"` // crash until the instance was ready again
	Back          int             `json:"back"`
	BackP50MS     float64         `json:"back_p50_ms"` // from the crash
	BackP99MS     float64         `json:"back_p99_ms"`
	BackMaxMS     float64         `json:"back_max_ms"`
	Instances     []stormInstance `json:"instances"`
	NATSRSSBefore float64         `json:"nats_rss_before_mib"`
	NATSRSSAfter  float64         `json:"nats_rss_after_mib"`
	NATSCPUSecs   float64         `json:"nats_cpu_seconds"` // from the crash until all were back
	// HarnessCPUSecs is this process's, likewise: the 5,000 agents
	// reconnecting share the machine with the relays.
	HarnessCPUSecs float64 `json:"harness_cpu_seconds"`
	Probed         int     `json:"probed"`
	ProbeAnswered  int     `json:"probe_answered"` // 2xx from the agents, not 202
	ProbeQueued    int     `json:"probe_queued"`
	ProbeFailed    int     `json:"probe_failed"`
	ProbeLost      int     `json:"probe_lost"`
}

// stormInstance is one relay instance in the storm: the crashed one
// (restarted) or a survivor.
type stormInstance struct {
	Instance  int     `json:"instance"`
	Agents    int     `json:"agents_after"` // that reconnected to it
	RSSBefore float64 `json:"rss_before_mib"`
	RSSPeak   float64 `json:"rss_peak_mib,omitempty"` // survivors: during the storm
	RSSAfter  float64 `json:"rss_after_mib"`
	CPUSecs   float64 `json:"cpu_seconds,omitempty"` // survivors: from the crash until all were back
}

// writeCluster prints the cluster phases' figures, as aligned text or
// markdown.
func (r *report) writeCluster(w io.Writer, md bool) {
	if len(r.Scale) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, md)
		t.row("relays", "agents", "conc", "sent", "2xx (202)", "delivered", "lost", "dup", "deliveries/s", "per instance",
			"p50 ms", "p99 ms", "relays CPU µs", "NATS CPU µs", "relays+NATS µs", "agents CPU µs", "cores busy", "relay peak RSS MiB", "NATS peak RSS MiB")
		for _, s := range r.Scale {
			t.row(fmt.Sprint(s.Relays), fmt.Sprint(s.Agents), fmt.Sprint(s.Concurrency), fmt.Sprint(s.Sent),
				fmt.Sprintf("%d (%d)", s.OK, s.Queued), fmt.Sprint(s.Delivered), fmt.Sprint(s.Lost), fmt.Sprint(s.Duplicates),
				thousands(s.RPS), thousands(s.PerInstance), fixed2(s.P50), fixed2(s.P99),
				fixed0(s.CPURelays), fixed0(s.CPUNATS), fixed0(s.CPUCluster), fixed0(s.CPUAgents), fixed2(s.Cores), fixed1(s.RSSRelay), fixed1(s.RSSNATS))
		}
		t.flush()
		if !md {
			for _, s := range r.Scale {
				if s.FirstError != "" {
					fmt.Fprintf(w, "cluster of %d, c=%d: first failure: %s\n", s.Relays, s.Concurrency, s.FirstError)
				}
			}
		}
	}
	if f := r.Failover; f != nil {
		fmt.Fprintln(w)
		for _, l := range f.lines() {
			if md {
				l = "- " + l
			}
			fmt.Fprintln(w, l)
		}
	}
	if s := r.Storm; s != nil {
		fmt.Fprintln(w)
		for _, l := range s.lines() {
			if md {
				l = "- " + l
			}
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w) // a markdown table right after a list would belong to its last item
		t := newTable(w, md)
		t.row("instance", "agents after", "RSS before MiB", "peak MiB", "after MiB", "CPU s")
		for _, in := range s.Instances {
			name, peak, cpu := fmt.Sprint(in.Instance), fixed1(in.RSSPeak), fixed2(in.CPUSecs)
			if in.RSSPeak == 0 {
				name, peak, cpu = name+" (crashed, restarted)", "", ""
			}
			t.row(name, fmt.Sprint(in.Agents), fixed1(in.RSSBefore), peak, fixed1(in.RSSAfter), cpu)
		}
		t.flush()
	}
}

func (f *failoverResult) lines() []string {
	out := []string{fmt.Sprintf("failover: %d instances, %d agents; instance %d, holding %d of them, crashed (SIGKILL) %.1fs into %.0fs of load at concurrency %d",
		f.Relays, f.Agents, f.Crashed, f.Moved, f.CrashAtSecs, f.LoadSecs, f.Concurrency),
		fmt.Sprintf("failover: %d of %d agents back on another instance, the last %.0f ms after the crash (each: %s ms; longest down as the agents saw it %.0f ms); %d queued deliveries followed them",
			f.Reconnected, f.Moved, f.ReconnectMaxMS, joinFloats(f.ReconnectMS), f.DownMaxMS, f.QueuedOnReconnect),
		fmt.Sprintf("failover: %d sent, %d answered 2xx (%d of them 202, queued), %d failed (%d without an answer); %d distinct at the receiver, %d lost, %d duplicates; all there %.1fs after the load",
			f.Sent, f.OK, f.Queued, f.Failed, f.Refused, f.Delivered, f.Lost, f.Duplicates, f.DrainSecs),
		fmt.Sprintf("failover: latency p50 %.2f ms, p99 %.2f ms, max %.0f ms; %d requests took over 1s", f.P50, f.P99, f.Max, f.Slow)}
	if f.FirstError != "" {
		out = append(out, "failover: first failure: "+f.FirstError)
	}
	return out
}

func (s *stormResult) lines() []string {
	out := []string{fmt.Sprintf("storm: %d of %d agents (agent.Agent, in the harness) on instance 0 of %d, connected in %.1fs; instance 0 crashed (SIGKILL) and started again (ready %.0f ms after the crash)",
		s.Connected, s.Agents, s.Relays, s.ConnectSecs, s.RestartMS),
		fmt.Sprintf("storm: %d of %d back, p50 %.0f ms, p99 %.0f ms, all %.0f ms after the crash; NATS RSS %.1f MiB before, %.1f MiB after, %.2f s of CPU meanwhile (the harness, its agents: %.2f s)",
			s.Back, s.Connected, s.BackP50MS, s.BackP99MS, s.BackMaxMS, s.NATSRSSBefore, s.NATSRSSAfter, s.NATSCPUSecs, s.HarnessCPUSecs),
		fmt.Sprintf("storm: then one delivery to each channel, through every instance in turn: %d sent, %d answered by the agents, %d queued (202), %d failed, %d lost",
			s.Probed, s.ProbeAnswered, s.ProbeQueued, s.ProbeFailed, s.ProbeLost)}
	if s.FirstError != "" {
		out = append(out, "storm: first failure: "+s.FirstError)
	}
	return out
}

func joinFloats(fs []float64) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fixed0(f))
	}
	return strings.Join(parts, ", ")
}

// table prints rows as aligned text, or as a markdown table whose rule
// follows the first row.
type table struct {
	w    io.Writer
	md   bool
	tw   *tabwriter.Writer
	rows int
}

func newTable(w io.Writer, md bool) *table {
	t := &table{w: w, md: md}
	if !md {
		t.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	}
	return t
}

func (t *table) row(cells ...string) {
	if !t.md {
		fmt.Fprintln(t.tw, strings.Join(cells, "\t")+"\t")
		return
	}
	fmt.Fprintf(t.w, "| %s |\n", strings.Join(cells, " | "))
	if t.rows == 0 {
		rule := []string{"---"}
		for range cells[1:] {
			rule = append(rule, "--:")
		}
		fmt.Fprintf(t.w, "| %s |\n", strings.Join(rule, " | "))
	}
	t.rows++
}

func (t *table) flush() {
	if t.tw != nil {
		t.tw.Flush()
	}
}

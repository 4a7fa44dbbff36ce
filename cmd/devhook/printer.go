package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/hint"
)

// The terminal output of devhook listen: a ready block (or line), then a
// line per delivery, retry, replay and connection change, as human text
// with colours on a terminal or as one JSON object a line with --json
// (encoding/json's, the fields in their structs' order). The lines'
// formats are described in docs/LISTEN.md.

// readyInfo is what the ready line says.
type readyInfo struct {
	PublicURL    string   `json:"public_url"`
	InspectorURL string   `json:"inspector_url"`
	Channel      string   `json:"channel"`
	Forward      []string `json:"forward"`
	// Routes are listen's routes, in order (--route, --routes).
	Routes      []devhook.Route `json:"routes,omitempty"`
	Local       bool            `json:"local_only"`
	SecretKnown bool            `json:"secret_known"`
	Verify      string          `json:"verify"`
	Data        string          `json:"data"`
	Webhook     string          `json:"webhook,omitempty"`
	// Secret is the webhook's signing secret, fetched from the service
	// (--register, --webhook), for the receiver; "" with --secret.
	Secret string `json:"secret,omitempty"`
	// Connected is !waiting, set by ready.
	Connected bool `json:"connected"`
	// waiting: listen cannot record yet (a full disk) and does not
	// connect until it can; a "connected" line follows then.
	waiting bool
	builtIn bool // the relay runs in this process, its queue beside the store
	// relayUnreached: why the relay did not answer at start, or "".
	relayUnreached string
	webhookNote    string // the human line about the webhook
}

// printer writes listen's output: human lines or one JSON object a line.
// Each goes to w in one Write, without a lock held: w must take whole
// lines from many goroutines (listen gives it a lineWriter).
type printer struct {
	mu   sync.Mutex // for logf's writer
	w    io.Writer
	json bool
	// color: verdicts and statuses in colour (useColor decides).
	color bool
	loc   *time.Location // nil: local time
	// retryFor is --retry-for, for the note on an owed delivery.
	retryFor time.Duration

	// The ready line comes first: deliveries and retries may be handled
	// between the agent's connection and the ready line, and with
	// holdUntilReady their lines wait in early until it is written.
	holdUntilReady bool
	isReady        atomic.Bool
	gate           sync.Mutex
	early          [][]byte

	// Hints: each kind once in the human lines (the fix is the same for
	// every delivery); webhook is the one whose secret listen verifies
	// with, which the hints name.
	hintMu  sync.Mutex
	hinted  map[string]bool
	webhook string
}

// setWebhook tells the hints which webhook's secret listen verifies with.
func (p *printer) setWebhook(id string) {
	p.hintMu.Lock()
	p.webhook = id
	p.hintMu.Unlock()
}

// advice is the hint on attempt a of d, and whether the human lines
// showed its kind already.
func (p *printer) advice(d *devhook.Delivery, a *devhook.Attempt) (adv hint.Advice, shown bool) {
	p.hintMu.Lock()
	defer p.hintMu.Unlock()
	adv = hint.Advise(d, a, hint.Context{Webhook: p.webhook})
	if adv.Text == "" {
		return adv, false
	}
	return adv, p.hinted[adv.Kind]
}

// hintShown notes that the human lines showed a hint of kind.
func (p *printer) hintShown(kind string) {
	p.hintMu.Lock()
	defer p.hintMu.Unlock()
	if p.hinted == nil {
		p.hinted = map[string]bool{}
	}
	p.hinted[kind] = true
}

// write sends one or more whole lines to w, or keeps them until the ready
// line is out.
func (p *printer) write(b []byte) {
	if p.holdUntilReady && !p.isReady.Load() {
		p.gate.Lock()
		if !p.isReady.Load() {
			p.early = append(p.early, b)
			p.gate.Unlock()
			return
		}
		p.gate.Unlock()
	}
	p.w.Write(b)
}

// writeReady writes the ready line b, then the lines that waited for it.
func (p *printer) writeReady(b []byte) {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.w.Write(b)
	p.flushLocked()
}

// flush writes the lines that wait for a ready line that will not come.
func (p *printer) flush() {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.flushLocked()
}

func (p *printer) flushLocked() {
	for _, l := range p.early {
		p.w.Write(l)
	}
	p.early = nil
	p.isReady.Store(true)
}

func (p *printer) emit(v any) { p.write(jsonLine(v)) }

// jsonLine is v as one line of JSON.
func jsonLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"event": "log", "message": "devhook: cannot print an event: " + err.Error()})
	}
	return append(b, '\n')
}

func (p *printer) ready(r readyInfo) {
	r.Connected = !r.waiting
	if p.json {
		p.writeReady(jsonLine(struct {
			Event string `json:"event"`
			readyInfo
		}{"ready", r}))
		return
	}
	var b bytes.Buffer
	if r.webhookNote != "" {
		fmt.Fprintf(&b, "%s\n", r.webhookNote)
	}
	if !r.waiting {
		fmt.Fprintf(&b, "devhook is listening\n")
	} else {
		fmt.Fprintf(&b, "devhook is not connected yet: it cannot record deliveries, and connects once it can\n")
	}
	fmt.Fprintf(&b, "  public URL  %s\n", r.PublicURL)
	if r.Local {
		fmt.Fprintf(&b, "              (built-in relay: reachable from this machine only; use --relay for a public one)\n")
	}
	if len(r.Routes) == 0 {
		fmt.Fprintf(&b, "  forward to  %s\n", strings.Join(r.Forward, ", "))
	} else {
		for _, rt := range r.Routes {
			fmt.Fprintf(&b, "  route %-4d  %s\n", rt.Index, rt.Text)
		}
		fmt.Fprintf(&b, "  forward to  %s  (what no route matches)\n", strings.Join(r.Forward, ", "))
	}
	if r.InspectorURL != "" {
		fmt.Fprintf(&b, "  inspector   %s\n", r.InspectorURL)
	}
	secret := "no secret: signatures cannot be checked (pass --secret, or --register)"
	if r.SecretKnown {
		secret = "secret known, verify=" + r.Verify
	}
	fmt.Fprintf(&b, "  signature   %s\n", secret)
	if r.Secret != "" {
		fmt.Fprintf(&b, "  secret      %s  (webhook %s's: give your receiver this one)\n", r.Secret, r.Webhook)
	}
	switch {
	case !r.waiting:
		fmt.Fprintf(&b, "  recording   %s\n\n", r.Data)
	case r.relayUnreached != "":
		fmt.Fprintf(&b, "  recording   %s: cannot write there (no room?); nor did the relay answer (%s):\n"+
			"              once it does, it queues what is sent meanwhile (202)\n\n", r.Data, r.relayUnreached)
	case r.builtIn:
		fmt.Fprintf(&b, "  recording   %s: cannot write there (no room?); the built-in relay queues what is sent meanwhile\n"+
			"              while its own queue, in the same directory, has room, and answers 503 beyond\n\n", r.Data)
	default:
		fmt.Fprintf(&b, "  recording   %s: cannot write there (no room?); the relay queues what is sent meanwhile (202)\n\n", r.Data)
	}
	p.writeReady(b.Bytes())
}

func (p *printer) result(r agent.Result) {
	switch {
	case r.Replay:
		p.replayed(r)
		return
	case r.GaveUp:
		p.gaveUp(r)
		return
	case r.Retry > 0, r.Followed:
		p.retried(r)
		return
	}
	d := r.Delivery
	var dur devhook.Duration
	status := r.Status
	if r.Attempt != nil {
		dur = r.Attempt.Duration
	}
	if p.json {
		adv, _ := p.advice(d, r.Attempt)
		l := deliveryLine{"delivery", d.ID, d.Method, d.Path, d.Event.RunID, d.Event.StatusV2, d.Verdict.Result, status, receiverStatus(r.Attempt),
			float64(dur) / float64(time.Millisecond), d.Queued, r.Cut, r.Duplicate, r.Owed && p.retryFor > 0, dropped(r.Attempt),
			cmp.Or(r.Error, attemptError(r.Attempt)), adv.Text, failedCopies(r.Copies), resultRoute(r)}
		p.write(jsonLine(l))
		return
	}
	p.write(p.humanLine(r))
}

// The columns of a delivery line.
const (
	pathWidth = 24
	runWidth  = 28
)

// humanLine is the terminal line of a delivery handled from the relay,
// with a line more for each copy target that did not take it.
//
// The arrow shows what the receiver answered, as the record keeps it and
// the filters find it: its status, or "none" when it gave no status (no
// answer, or not forwarded). When the sender got something else, the line
// says so in brackets: "→ none (sender got 502)".
func (p *printer) humanLine(r agent.Result) []byte {
	d := r.Delivery
	var b bytes.Buffer
	b.WriteString(d.ReceivedAt.In(p.location()).Format("15:04:05.000"))
	fmt.Fprintf(&b, "  %-6s %-*s %-*s ", d.Method, pathWidth, clip(pathQuery(d.Path, d.RawQuery), pathWidth), runWidth, runColumn(d.Event, runWidth))
	b.WriteString(p.paint(verdictColor(d.Verdict.Result), fmt.Sprintf("%-18s", d.Verdict.Result)))
	received := 0
	if r.Attempt != nil {
		received = r.Attempt.Status
	}
	b.WriteString(" → ")
	switch {
	case dropped(r.Attempt):
		// Not forwarded: its sender got 202 (agent.dropAnswer).
		b.WriteString(p.paint(colorYellow, "dropped"))
	default:
		b.WriteString(p.paint(statusColor(received), statusWord(received)))
	}
	switch {
	case dropped(r.Attempt):
	case r.Cut && !d.Queued:
		b.WriteString(" (sender got 202: queued by the relay)")
	case !d.Queued && r.Status != received && r.Status != 0:
		fmt.Fprintf(&b, " (sender got %d)", r.Status)
	}
	took := "-"
	if r.Attempt != nil && !dropped(r.Attempt) {
		took = formatDuration(time.Duration(r.Attempt.Duration))
	}
	b.WriteString("  " + took)
	switch {
	case r.Rejected:
		b.WriteString("  (not forwarded: the signature check failed)")
	case r.Error != "":
		b.WriteString("  " + r.Error)
	}
	if rt := resultRoute(r); rt != nil && rt.Index > 0 {
		fmt.Fprintf(&b, "  (route %d)", rt.Index)
	}
	if d.Queued {
		b.WriteString("  (was queued)")
	}
	if r.Duplicate {
		b.WriteString("  (already delivered)")
	}
	if e := attemptError(r.Attempt); e != "" {
		b.WriteString("  " + e)
	}
	switch {
	case r.Cut:
		b.WriteString("  (devhook stopped before the relay had the answer: the relay keeps the delivery and sends it again on the next start)")
	case r.Behind:
		b.WriteString("  (not forwarded yet: an earlier delivery of its run is owed to the receiver; this one follows it)")
	case r.Owed && p.retryFor > 0:
		b.WriteString("  (owed: retried for up to " + agent.FormatDuration(p.retryFor) + ")")
	}
	// A hint once per kind: the next deliveries with the same cause
	// would repeat the same fix.
	if adv, shown := p.advice(d, r.Attempt); adv.Text != "" && !shown {
		p.hintShown(adv.Kind)
		b.WriteString("\n              hint: " + adv.Text)
	}
	b.WriteByte('\n')
	for _, c := range r.Copies {
		if copyTaken(c) {
			continue
		}
		fmt.Fprintf(&b, "              copy to %s → %s  %s", c.Target, p.paint(statusColor(c.Status), statusWord(c.Status)), formatDuration(time.Duration(c.Duration)))
		if c.Error != "" {
			b.WriteString("  " + c.Error)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// dropped reports whether attempt a is the drop a route made of its
// delivery.
func dropped(a *devhook.Attempt) bool { return a != nil && a.Kind == devhook.AttemptDrop }

// resultRoute is the route that took r's delivery, or nil without routes
// (and for a delivery refused by --verify enforce, which none took).
func resultRoute(r agent.Result) *devhook.Route {
	if r.Rejected {
		return nil
	}
	if r.Delivery.Route != nil {
		return r.Delivery.Route
	}
	if r.Attempt != nil && r.Attempt.Route != nil {
		return r.Attempt.Route
	}
	return r.Delivery.ArrivalRoute()
}

// statusWord is a receiver's status as the terminal, the filters and the
// inspector name it: the number, or "none" when it gave none.
func statusWord(status int) string {
	if status == 0 {
		return "none"
	}
	return strconv.Itoa(status)
}

// runColumn is the run's short id (devhook.ShortRunID: at most 12
// characters, the same for a run every time, accepted by scenario save
// --run), or "-" for a body that names none, padded to 12 so that the
// status_v2 column lines up, then its status_v2, within n (as deliveries
// list shows it, with a run or without).
func runColumn(ev devhook.Event, n int) string {
	short := "-"
	if ev.RunID != "" {
		short = devhook.ShortRunID(ev.RunID)
	}
	if ev.StatusV2 == "" {
		return short
	}
	return clip(fmt.Sprintf("%-*s %s", devhook.ShortRunIDLen, short, ev.StatusV2), n)
}

// pathQuery is a path with its query string, as the sender posted it.
func pathQuery(path, rawQuery string) string {
	if rawQuery == "" {
		return path
	}
	return path + "?" + rawQuery
}

// formatDuration is the one format of durations in the terminal:
// milliseconds with one decimal under a second, seconds with two above.
func formatDuration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

// retried prints a retry that delivered an owed delivery, or the first
// try of one that was owed behind an earlier one of its run (Followed),
// which is no retry: {"event":"followed","waited_ms":…} with --json.
func (p *printer) retried(r agent.Result) {
	d, at := r.Delivery, r.Attempt
	after := at.StartedAt.Sub(r.Since)
	if p.json {
		ev := struct {
			Event    string         `json:"event"`
			ID       string         `json:"id"`
			Method   string         `json:"method"`
			Path     string         `json:"path"`
			Status   int            `json:"status"`
			Duration float64        `json:"duration_ms"`
			Retry    *int           `json:"retry,omitempty"`
			AfterMS  *int64         `json:"after_ms,omitempty"`
			WaitedMS *int64         `json:"waited_ms,omitempty"`
			Error    string         `json:"error,omitempty"`
			Route    *devhook.Route `json:"route,omitempty"`
		}{Event: "retry", ID: d.ID, Method: d.Method, Path: d.Path, Status: r.Status,
			Duration: float64(at.Duration) / float64(time.Millisecond), Error: at.Error, Route: at.Route}
		ms := after.Milliseconds()
		if r.Followed {
			ev.Event, ev.WaitedMS = "followed", &ms
		} else {
			ev.Retry, ev.AfterMS = &r.Retry, &ms
		}
		p.emit(ev)
		return
	}
	how := fmt.Sprintf("delivered by retry %d, %s after the first try failed", r.Retry, agent.FormatDuration(after))
	if r.Followed {
		how = "delivered at its first try, after waiting " + agent.FormatDuration(after) + " behind an earlier delivery of its run"
	}
	line := fmt.Sprintf("%s  %-6s %-*s → %s  %s  (%s)",
		at.StartedAt.In(p.location()).Format("15:04:05.000"), d.Method, pathWidth, clip(pathQuery(d.Path, d.RawQuery), pathWidth),
		p.paint(statusColor(r.Status), statusWord(r.Status)), formatDuration(time.Duration(at.Duration)), how)
	p.write([]byte(line + "\n"))
}

// replayed prints a replay asked for from the inspector or devhook replay.
func (p *printer) replayed(r agent.Result) {
	d, at := r.Delivery, r.Attempt
	resigned := at.Resigned()
	adv, shown := p.advice(d, at)
	if p.json {
		p.emit(struct {
			Event    string         `json:"event"`
			ID       string         `json:"id"`
			Seq      int            `json:"seq"`
			Target   string         `json:"target"`
			Status   int            `json:"status"`
			Duration float64        `json:"duration_ms"`
			Made     string         `json:"made,omitempty"`
			Resigned bool           `json:"resigned,omitempty"`
			Error    string         `json:"error,omitempty"`
			Hint     string         `json:"hint,omitempty"`
			Route    *devhook.Route `json:"route,omitempty"`
		}{"replay", d.ID, at.Seq, at.Target, at.Status, float64(at.Duration) / float64(time.Millisecond), at.Made, resigned, at.Error, adv.Text, at.Route})
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s  %-6s %-*s replay of %s → %s  %s", at.StartedAt.In(p.location()).Format("15:04:05.000"), d.Method,
		pathWidth, clip(pathQuery(d.Path, d.RawQuery), pathWidth), d.ID, p.paint(statusColor(at.Status), statusWord(at.Status)),
		formatDuration(time.Duration(at.Duration)))
	switch {
	case at.Edited() && resigned:
		b.WriteString("  (edited, re-signed)")
	case at.Edited():
		b.WriteString("  (edited, not re-signed)")
	case resigned:
		b.WriteString("  (re-signed)")
	}
	if at.Error != "" {
		b.WriteString("  " + at.Error)
	}
	// A hint once per kind, as for deliveries.
	if adv.Text != "" && !shown {
		p.hintShown(adv.Kind)
		b.WriteString("\n              hint: " + adv.Text)
	}
	b.WriteByte('\n')
	p.write(b.Bytes())
}

// gaveUp prints that the agent stopped retrying a delivery.
func (p *printer) gaveUp(r agent.Result) {
	d := r.Delivery
	msg := "gave up on delivery " + d.ID + " " + strings.TrimPrefix(r.Error, "gave up ")
	if p.json {
		p.emit(struct {
			Event   string         `json:"event"`
			ID      string         `json:"id"`
			Method  string         `json:"method"`
			Path    string         `json:"path"`
			Status  int            `json:"status"`
			Error   string         `json:"error"`
			Message string         `json:"message"`
			Route   *devhook.Route `json:"route,omitempty"`
		}{"gave_up", d.ID, d.Method, d.Path, r.Status, r.Error, msg, resultRoute(r)})
		return
	}
	at := time.Now()
	if r.Attempt != nil && !r.Attempt.StartedAt.IsZero() {
		at = r.Attempt.StartedAt
	}
	p.write([]byte(at.In(p.location()).Format("15:04:05.000") + "  FAILED: " + msg + "\n"))
}

// note prints a line about what listen did, such as deleting its webhook:
// {"event":"webhook","message":…} with --json.
func (p *printer) note(msg string) {
	if p.json {
		p.emit(map[string]string{"event": "webhook", "message": msg})
		return
	}
	p.write([]byte(msg + "\n"))
}

func (p *printer) location() *time.Location {
	if p.loc == nil {
		return time.Local
	}
	return p.loc
}

func (p *printer) logf(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) {
		if p.json {
			p.emit(map[string]string{"event": "log", "message": fmt.Sprintf(format, args...)})
			return
		}
		p.mu.Lock()
		fmt.Fprintf(w, "devhook: "+format+"\n", args...)
		p.mu.Unlock()
	}
}

func attemptError(a *devhook.Attempt) string {
	if a == nil {
		return ""
	}
	return a.Error
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

// deliveryLine is the --json line of a delivery handled from the relay.
type deliveryLine struct {
	Event     string     `json:"event"`
	ID        string     `json:"id"`
	Method    string     `json:"method"`
	Path      string     `json:"path"`
	RunID     string     `json:"run_id,omitempty"`
	StatusV2  string     `json:"status_v2,omitempty"`
	Verdict   string     `json:"verdict"`
	Status    int        `json:"status"`
	Receiver  *int       `json:"receiver_status"`
	Duration  float64    `json:"duration_ms"`
	Queued    bool       `json:"queued,omitempty"`
	Cut       bool       `json:"cut,omitempty"`
	Duplicate bool       `json:"duplicate,omitempty"`
	Owed      bool       `json:"owed,omitempty"`
	Dropped   bool       `json:"dropped,omitempty"`
	Error     string     `json:"error,omitempty"`
	Hint      string     `json:"hint,omitempty"`
	Copies    []copyLine `json:"failed_copies,omitempty"`
	// Route took the delivery (listen --route): nil without routes.
	Route *devhook.Route `json:"route,omitempty"`
}

// copyLine is a copy target that did not take a delivery, for --json.
type copyLine struct {
	Target   string `json:"target"`
	Receiver *int   `json:"receiver_status"`
	Error    string `json:"error,omitempty"`
}

// failedCopies are the copies that were not answered 2xx or 3xx; nil
// when all were (or there are none).
func failedCopies(copies []*devhook.Attempt) []copyLine {
	var out []copyLine
	for _, c := range copies {
		if !copyTaken(c) {
			out = append(out, copyLine{c.Target, receiverStatus(c), c.Error})
		}
	}
	return out
}

func copyTaken(c *devhook.Attempt) bool { return c.Status >= 200 && c.Status < 400 }

// receiverStatus is the receiver's status for --json: nil (null) when it
// gave none.
func receiverStatus(a *devhook.Attempt) *int {
	if a == nil || a.Status == 0 {
		return nil
	}
	return &a.Status
}

// connection says that the agent is connected: "connected" after
// "connecting to …", and after an outage "reconnected after 12s, 3 queued
// deliveries follow" ({"event":"reconnected",…} with --json; the first
// connection's line in --json is the ready line).
func (p *printer) connection(c agent.Connection, stderr io.Writer) {
	if c.Fails > 1 && c.Unsaid { // the count of the tries not said in full
		p.logf(stderr)("connected after %d failed tries over %s", c.Fails, agent.FormatDuration(c.Failing))
	}
	if p.json {
		if c.Reconnect {
			p.emit(struct {
				Event  string `json:"event"`
				DownMS int64  `json:"down_ms"`
				Queued int    `json:"queued"`
			}{"reconnected", c.Down.Milliseconds(), c.Queued})
		}
		return
	}
	msg := "connected"
	if c.Reconnect {
		msg = "reconnected after " + agent.FormatDuration(c.Down.Round(time.Second))
	}
	p.connectedLine(msg, c.Queued, stderr)
}

// connectedAfterWait says that the agent connected, waited after a ready
// line that said it could not record yet, in one line that parts the wait
// for the disk from the one for the relay when it failed to connect:
// "connected after waiting 12s to record, 3 queued deliveries follow", or
// "connected after waiting 25s: 8s to record, 17s for the relay (6 failed
// tries)" ({"event":"connected","waited_ms":…,"record_ms":…,"relay_ms":…,
// "failed_tries":…} with --json).
func (p *printer) connectedAfterWait(c agent.Connection, waited time.Duration, stderr io.Writer) {
	record := min(c.Unrecordable, waited)
	relay := time.Duration(0)
	if c.Fails > 0 {
		relay = waited - record
	}
	if p.json {
		p.emit(struct {
			Event    string `json:"event"`
			WaitedMS int64  `json:"waited_ms"`
			RecordMS int64  `json:"record_ms"`
			RelayMS  int64  `json:"relay_ms"`
			Fails    int    `json:"failed_tries"`
			Queued   int    `json:"queued"`
		}{"connected", waited.Milliseconds(), record.Milliseconds(), relay.Milliseconds(), c.Fails, c.Queued})
		return
	}
	msg := "connected after waiting " + agent.FormatDuration(waited) + " to record"
	if c.Fails > 0 {
		tries := fmt.Sprintf("%d failed tries", c.Fails)
		if c.Fails == 1 {
			tries = "1 failed try"
		}
		msg = "connected after waiting " + agent.FormatDuration(waited) + ": "
		if record > 0 {
			msg += agent.FormatDuration(record) + " to record, "
		}
		msg += agent.FormatDuration(relay) + " for the relay (" + tries + ")"
	}
	p.connectedLine(msg, c.Queued, stderr)
}

// connectedLine writes msg, a connection's line, on stderr, with how many
// queued deliveries follow when there are any.
func (p *printer) connectedLine(msg string, queued int, stderr io.Writer) {
	switch {
	case queued == 1:
		msg += ", 1 queued delivery follows"
	case queued > 1:
		msg += fmt.Sprintf(", %d queued deliveries follow", queued)
	}
	p.mu.Lock()
	fmt.Fprintln(stderr, msg)
	p.mu.Unlock()
}

// stopping says that listen stops and what it waits for: the deliveries
// under way get agent.ShutdownGrace to finish; a second Ctrl-C quits at
// once (main's signalContext).
func (p *printer) stopping(inFlight int, stderr io.Writer) {
	if p.json {
		p.emit(struct {
			Event    string `json:"event"`
			InFlight int    `json:"in_flight"`
		}{"stopping", inFlight})
		return
	}
	msg := "stopping"
	if inFlight > 0 {
		what := "deliveries"
		if inFlight == 1 {
			what = "delivery"
		}
		msg = fmt.Sprintf("stopping, waiting up to %d s for %d %s in flight (Ctrl-C again to quit now)", int(agent.ShutdownGrace/time.Second), inFlight, what)
	}
	p.mu.Lock()
	fmt.Fprintln(stderr, msg)
	p.mu.Unlock()
}

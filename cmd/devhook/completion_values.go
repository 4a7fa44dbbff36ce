package main

// Where completion's values come from (the list is at the top of
// completion.go). Each function reads only, within ctx.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/storage"
)

// recorded is what listen recorded, as completion reads it.
type recorded interface {
	List(ctx context.Context, f devhook.Filter) ([]devhook.Summary, error)
	Delivery(ctx context.Context, id string) (*devhook.Delivery, error)
}

// withRecorded calls fn with the deliveries of the command's data
// directory (--data, else ~/.devhook), found as the deliveries commands
// find them: the inspector at --inspect, else the one of the listen
// recording there (listen.json); else, or when that one does not answer,
// the store opened read-only.
func withRecorded(ctx context.Context, cmd *cobra.Command, fn func(recorded) error) error {
	dir := completionDataDir(cmd)
	base := ""
	if addr := flagString(cmd, "inspect"); addr != "" && addr != "off" {
		base = "http://" + addr
	} else if l, err := running.Read(dir); err == nil {
		base = l.InspectorURL
	}
	if base != "" {
		c := &inspector.Client{BaseURL: strings.TrimSuffix(base, "/"), HTTP: &http.Client{Timeout: completionTimeout()}}
		if err := fn(c); err == nil || ctx.Err() != nil {
			return err
		}
		// Not answering: a stale listen.json, or a listen stopping. The
		// store's lock tells.
	}
	lock := 300 * time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		lock = min(lock, time.Until(dl))
	}
	if lock <= 0 {
		return ctx.Err()
	}
	db, err := storage.Open(filepath.Join(dir, "deliveries.db"), storage.Config{ReadOnly: true, LockTimeout: lock, Logf: func(string, ...any) {}})
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(offline{db: db})
}

// completionDataDir is the command's --data as the shell passed it (a
// leading ~ not expanded: the words are as typed), else ~/.devhook.
func completionDataDir(cmd *cobra.Command) string {
	dir := flagString(cmd, "data")
	if dir == "" {
		return defaultDataDir()
	}
	if home, err := os.UserHomeDir(); err == nil && (dir == "~" || strings.HasPrefix(dir, "~/")) {
		dir = filepath.Join(home, dir[1:])
	}
	return dir
}

// flagString is the value of the command's string flag name, "" when it
// has none.
func flagString(cmd *cobra.Command, name string) string {
	v, err := cmd.Flags().GetString(name)
	if err != nil {
		return ""
	}
	return v
}

// deliveryIDs are the recorded deliveries' ids that start with
// toComplete, newest first, those already on the line left out. Ids sort
// as text (UUIDv7), so the newest that start so are the newest before
// toComplete followed by "~", above every character of an id.
func deliveryIDs(ctx context.Context, cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, error) {
	f := devhook.Filter{Limit: maxCandidates + len(args)}
	if toComplete != "" {
		f.Before = toComplete + "~"
	}
	var items []devhook.Summary
	err := withRecorded(ctx, cmd, func(r recorded) (err error) {
		items, err = r.List(ctx, f)
		return err
	})
	var out []cobra.Completion
	for _, s := range items {
		if !slices.Contains(args, s.ID) && len(out) < maxCandidates {
			out = append(out, cand(s.ID, deliveryText(s)))
		}
	}
	return out, err
}

// deliveryText describes a delivery: when, the request, the verdict and
// the receiver's status.
func deliveryText(s devhook.Summary) string {
	return fmt.Sprintf("%s %s %s  %s → %s", s.ReceivedAt.Local().Format("01-02 15:04:05"), s.Method, clip(s.Path, 24),
		s.Verdict, statusWord(s.Status))
}

// deliveryIDList completes a comma-separated list of ids (--id a,b,…).
func deliveryIDList(ctx context.Context, cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, error) {
	done, last := "", toComplete
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done, last = toComplete[:i+1], toComplete[i+1:]
	}
	cands, err := deliveryIDs(ctx, cmd, append(args, strings.Split(done, ",")...), last)
	for i := range cands {
		cands[i] = done + cands[i]
	}
	return cands, err
}

// runSeen is a run as its recorded deliveries show it.
type runSeen struct {
	id       string
	statusV2 string    // of its newest delivery
	last     time.Time // its newest delivery's
	newest   string    // its newest delivery's id
	n        int       // deliveries among those read
}

// recentRuns are the runs of the newest deliveries (at most
// recentDeliveries of them), newest first.
func recentRuns(ctx context.Context, r recorded) ([]runSeen, error) {
	items, err := r.List(ctx, devhook.Filter{Limit: recentDeliveries})
	if err != nil {
		return nil, err
	}
	var runs []runSeen
	at := map[string]int{}
	for _, s := range items {
		id := s.Event.RunID
		if id == "" {
			continue
		}
		if i, ok := at[id]; ok {
			runs[i].n++
			continue
		}
		at[id] = len(runs)
		runs = append(runs, runSeen{id: id, statusV2: s.Event.StatusV2, last: s.ReceivedAt, newest: s.ID, n: 1})
	}
	return runs, nil
}

func (r runSeen) text() string {
	return fmt.Sprintf("%s, %s, %s", dash(r.statusV2), plural(r.n, "delivery"), r.last.Local().Format("01-02 15:04:05"))
}

// plural is "1 delivery", "2 deliveries", "3 recorded runs".
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// runIDs are the runs of the recorded deliveries, newest first.
func runIDs(ctx context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	var out []cobra.Completion
	err := withRecorded(ctx, cmd, func(r recorded) error {
		runs, err := recentRuns(ctx, r)
		for _, run := range runs {
			out = append(out, cand(run.id, run.text()))
		}
		return err
	})
	return out, err
}

// runApps reads the application of each run from its newest delivery's
// body (data.application_id), at most 100 runs, and stops at ctx's end
// with what it has.
func runApps(ctx context.Context, r recorded, runs []runSeen) map[string]string {
	apps := map[string]string{}
	for _, run := range runs[:min(len(runs), 100)] {
		d, err := r.Delivery(ctx, run.newest)
		if ctx.Err() != nil {
			break
		}
		var body devhook.RunStatus
		if err == nil && json.Unmarshal(d.Body, &body) == nil && body.Data.ApplicationID != "" {
			apps[run.id] = body.Data.ApplicationID
		}
	}
	return apps
}

// appIDs are the applications of the recorded runs, the most recent first.
func appIDs(ctx context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	var out []cobra.Completion
	err := withRecorded(ctx, cmd, func(r recorded) error {
		runs, err := recentRuns(ctx, r)
		if err != nil {
			return err
		}
		apps := runApps(ctx, r, runs)
		count := map[string]int{}
		var order []string
		for _, run := range runs {
			if app, ok := apps[run.id]; ok {
				if count[app] == 0 {
					order = append(order, app)
				}
				count[app]++
			}
		}
		for _, app := range order {
			out = append(out, cand(app, plural(count[app], "recorded run")))
		}
		return nil
	})
	return out, err
}

// runsOfApp are the recorded runs of the application args[0].
func runsOfApp(ctx context.Context, cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, error) {
	var out []cobra.Completion
	err := withRecorded(ctx, cmd, func(r recorded) error {
		runs, err := recentRuns(ctx, r)
		if err != nil {
			return err
		}
		apps := runApps(ctx, r, runs)
		for _, run := range runs {
			if apps[run.id] == args[0] {
				out = append(out, cand(run.id, run.text()))
			}
		}
		return nil
	})
	return out, err
}

// receiverStatuses are none and the statuses receivers gave the newest
// deliveries, with how many.
func receiverStatuses(ctx context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	out := []cobra.Completion{cand("none", "no answer, or not forwarded")}
	err := withRecorded(ctx, cmd, func(r recorded) error {
		items, err := r.List(ctx, devhook.Filter{Limit: recentDeliveries})
		count := map[int]int{}
		for _, s := range items {
			count[s.Status]++
		}
		for _, st := range slices.Sorted(maps.Keys(count)) {
			if st != 0 {
				out = append(out, cand(strconv.Itoa(st), fmt.Sprintf("%d of the last %d deliveries", count[st], len(items))))
			}
		}
		return err
	})
	if err != nil {
		out = out[:1] // none holds without the store
	}
	return out, nil
}

// deliveryHeaders are the header names of the delivery args[0] (replay
// ID --remove-header).
func deliveryHeaders(ctx context.Context, cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var out []cobra.Completion
	err := withRecorded(ctx, cmd, func(r recorded) error {
		d, err := r.Delivery(ctx, args[0])
		if err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(d.Header)) {
			out = append(out, cand(k, strings.Join(d.Header[k], ", ")))
		}
		return nil
	})
	return out, err
}

// runningListens are the listens running with the command's data
// directory and with ~/.devhook.
func runningListens(cmd *cobra.Command) []running.Listen {
	var out []running.Listen
	for _, dir := range []string{completionDataDir(cmd), defaultDataDir()} {
		if l, err := running.Read(dir); err == nil && !slices.ContainsFunc(out, func(o running.Listen) bool { return o.PID == l.PID }) {
			out = append(out, l)
		}
	}
	return out
}

// runningInspector is the inspector address of the listen recording in
// --data.
func runningInspector(_ context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	l, err := running.Read(completionDataDir(cmd))
	if err != nil || l.InspectorURL == "" {
		return nil, err
	}
	u, err := url.Parse(l.InspectorURL)
	if err != nil {
		return nil, err
	}
	return []cobra.Completion{cand(u.Host, fmt.Sprintf("devhook listen (pid %d) recording in %s", l.PID, l.Data))}, nil
}

// runningRelays are the relays of running listens, for a second listen to
// share one (listen --relay).
func runningRelays(_ context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	var out []cobra.Completion
	for _, l := range runningListens(cmd) {
		if l.RelayURL != "" {
			out = append(out, cand(l.RelayURL, fmt.Sprintf("the relay of devhook listen (pid %d)", l.PID)))
		}
	}
	return out, nil
}

// runningPublicURL is the public URL of the listen recording in --data
// (send URL).
func runningPublicURL(_ context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	l, err := running.Read(completionDataDir(cmd))
	if err != nil {
		return nil, err
	}
	return []cobra.Completion{cand(l.PublicURL, fmt.Sprintf("devhook listen (pid %d)", l.PID))}, nil
}

// serviceClient is a client of the service as the command's flags,
// environment and profile configure it, with a short timeout. Without an
// API key it takes the signed-in session's access token only while it
// has not expired: a refresh is never made here. withTeam: acting for the
// team of --team, SERVICE_TEAM or the profile.
func serviceClient(ctx context.Context, cmd *cobra.Command, withTeam bool) (*cloud.Client, error) {
	r, err := cloud.Resolve(cloud.Settings{Endpoint: flagString(cmd, "endpoint"), APIKey: flagString(cmd, "api-key"),
		Profile: flagString(cmd, "profile"), Team: flagString(cmd, "team"), ConfigPath: cloud.DefaultConfigPath()})
	if err != nil {
		return nil, err
	}
	var session cloud.Credentials
	if r.APIKey == "" {
		if session, err = unexpiredToken(r); err != nil {
			return nil, err
		}
	}
	cfg, err := r.Config(session)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = completionTimeout()
	if cfg.HTTPClient, err = auth.NewHTTPClient(r.SystemCerts, cfg.Timeout); err != nil {
		return nil, err
	}
	c, err := cloud.New(cfg)
	if err != nil || r.Team == "" || !withTeam {
		return c, err
	}
	id, err := c.ResolveTeam(ctx, r.Team)
	if err != nil {
		return nil, err
	}
	return c.WithTeam(id), nil
}

// bearerToken is an access token as it is stored.
type bearerToken string

func (t bearerToken) Token(context.Context) (string, error) { return string(t), nil }

// unexpiredToken is the resolved profile's stored access token, while it
// has not expired.
func unexpiredToken(r cloud.Resolved) (cloud.Credentials, error) {
	name, err := r.Session("", false)
	if err != nil {
		return nil, err
	}
	store, err := tokenStore(r.ConfigPath)
	if err != nil {
		return nil, err
	}
	t, err := store.Load(name)
	if err != nil {
		return nil, err
	}
	if t == nil || t.AccessToken == "" || t.Expired(time.Now()) {
		return nil, errors.New("no unexpired sign-in")
	}
	return bearerToken(t.AccessToken), nil
}

// webhookIDs are the service's webhooks.
func webhookIDs(ctx context.Context, cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, error) {
	c, err := serviceClient(ctx, cmd, true)
	if err != nil {
		return nil, err
	}
	ws, err := c.ListWebhooks(ctx)
	var out []cobra.Completion
	for _, w := range ws.Items {
		if !slices.Contains(args, w.ID) {
			out = append(out, cand(w.ID, w.EndpointURL))
		}
	}
	return out, err
}

// conversationIDs are the conversations of webhook args[0], newest first.
func conversationIDs(ctx context.Context, cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, error) {
	c, err := serviceClient(ctx, cmd, true)
	if err != nil {
		return nil, err
	}
	cs, err := c.ListConversations(ctx, args[0])
	var out []cobra.Completion
	for _, cv := range cs.Items[:min(len(cs.Items), maxCandidates)] {
		st := cv.Status
		if cv.HTTPStatus != 0 {
			st += " " + strconv.Itoa(cv.HTTPStatus)
		}
		out = append(out, cand(cv.ID, cv.CreatedAt+" "+st))
	}
	return out, err
}

// teamIDs are the teams of the signed-in user (the service answers over
// HTTPS only).
func teamIDs(ctx context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	c, err := serviceClient(ctx, cmd, false)
	if err != nil {
		return nil, err
	}
	ts, _, err := c.Organizations(ctx)
	var out []cobra.Completion
	for _, t := range ts {
		out = append(out, cand(t.ID, t.Name))
	}
	return out, err
}

// profileNames are the profiles of ~/.service/config.yaml.
func profileNames(context.Context, *cobra.Command, []string, string) ([]cobra.Completion, error) {
	f, err := cloud.LoadFile(cloud.DefaultConfigPath())
	if err != nil {
		return nil, err
	}
	var out []cobra.Completion
	for _, name := range slices.Sorted(maps.Keys(f.Profiles)) {
		out = append(out, cand(name, f.Profiles[name].Endpoint))
	}
	return out, nil
}

// sessionNames are the sign-in sessions with stored tokens
// (~/.service/auth/SESSION/tokens.json).
func sessionNames(context.Context, *cobra.Command, []string, string) ([]cobra.Completion, error) {
	store, err := tokenStore(cloud.DefaultConfigPath())
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(store.Dir())
	if err != nil {
		return nil, err
	}
	var out []cobra.Completion
	for _, e := range entries {
		if t, err := store.Load(e.Name()); err == nil && t != nil {
			desc := "signed in"
			if t.Expired(time.Now()) {
				desc = "access token expired (refreshed when used)"
			}
			out = append(out, cand(e.Name(), desc))
		}
	}
	return out, nil
}

// parked reads the parked deliveries of the stopped single relay in
// --data (a cluster's, --nats, are not read here).
func parked(cmd *cobra.Command) ([]parkedItem, error) {
	if flagString(cmd, "nats") != "" {
		return nil, errors.New("a cluster's parked deliveries are not completed")
	}
	db, err := boltrelay.Open(filepath.Join(completionDataDir(cmd), "relay.db"), boltrelay.Config{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ps, err := db.ListParked("")
	out := make([]parkedItem, len(ps))
	for i, p := range ps {
		out[i] = parkedItem{id: p.ID, channel: p.Channel, text: p.ReceivedAt.Local().Format("01-02 15:04:05") + " " + p.Reason}
	}
	return out, err
}

type parkedItem struct{ id, channel, text string }

func parkedIDs(_ context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	ps, err := parked(cmd)
	var out []cobra.Completion
	for _, p := range ps {
		out = append(out, cand(p.id, p.text))
	}
	return out, err
}

func parkedChannels(_ context.Context, cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, error) {
	ps, err := parked(cmd)
	var out []cobra.Completion
	for _, p := range ps {
		if !slices.Contains(out, p.channel) {
			out = append(out, p.channel)
		}
	}
	return out, err
}

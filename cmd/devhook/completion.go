package main

// Shell completion: what TAB offers after each command and flag.
//
// cobra's scripts (devhook completion bash|zsh|fish|powershell) run
// "devhook __complete WORDS... PARTIAL" and show what it prints: one
// candidate a line, "value<TAB>description", then ":DIRECTIVE". The
// functions that answer are attached here, in one place, by command path
// and flag name (addCompletions), so that no command's file says anything
// of completion. The values come from (completion_values.go):
//
//   - fixed sets: --verify, --format, the status_v2 values, the verdicts;
//   - what devhook listen recorded: delivery ids, run ids, application ids
//     (each run's data.application_id), receiver statuses, a delivery's
//     headers; through the running listen's inspector as the deliveries
//     commands find it, else the store opened read-only, never written;
//   - the service, for webhook, conversation and team ids, when an API key
//     or a sign-in whose access token has not expired is configured (a
//     refresh is never made: cut short, it could end the session);
//   - listen.json (a running listen's inspector, relay and public URL),
//     ~/.service (profiles, sessions), a stopped relay's relay.db (parked
//     deliveries), and the file system (files, directories).
//
// Every source is bounded by one deadline, DEVHOOK_COMPLETION_TIMEOUT
// (default 2s), and a source that fails offers nothing: completion never
// prints an error, never waits long and never writes.

import (
	"context"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devhook/devhook"
)

const (
	completionTimeoutEnv     = "DEVHOOK_COMPLETION_TIMEOUT"
	defaultCompletionTimeout = 2 * time.Second
	// maxCandidates bounds what one TAB offers: the newest first.
	maxCandidates = 50
	// recentDeliveries is how many of the newest deliveries runs, apps
	// and statuses are read from: the inspector's largest page.
	recentDeliveries = 500
)

// completionTimeout is how long one completion may take, from
// DEVHOOK_COMPLETION_TIMEOUT when it holds a duration.
func completionTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(completionTimeoutEnv)); err == nil && d > 0 {
		return d
	}
	return defaultCompletionTimeout
}

// addCompletions attaches the completion functions to the built tree: a
// command's arguments by its path ("deliveries show"), a flag's values by
// "path --name", else by "--name" on any command. A flag of a number or a
// duration offers nothing (and no file names); a string flag without an
// entry keeps cobra's default, file names, which a test forbids: each is
// listed, if only as free text.
func addCompletions(root *cobra.Command) {
	// cobra adds "completion" when it executes; added now, it is in the
	// tree that the docs and the README's tests read.
	root.InitDefaultCompletionCmd()
	args := argCompletions()
	flags := flagCompletions()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimSpace(strings.TrimPrefix(c.CommandPath(), root.Name()))
		if fn, ok := args[path]; ok && !c.HasSubCommands() {
			c.ValidArgsFunction = fn
		}
		// LocalFlags: a persistent flag is registered once, where it is defined.
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if fn := flagCompleter(flags, path, f); fn != nil {
				_ = c.RegisterFlagCompletionFunc(f.Name, fn) // a flag of c, not yet registered
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// flagCompleter is the function for flag f of the command at path, or nil
// for a flag without a value (a bool) or without an entry.
func flagCompleter(table map[string]cobra.CompletionFunc, path string, f *pflag.Flag) cobra.CompletionFunc {
	if fn, ok := table[strings.TrimSpace(path+" --"+f.Name)]; ok {
		return fn
	}
	if fn, ok := table["--"+f.Name]; ok {
		return fn
	}
	switch f.Value.Type() {
	case "int", "int64", "uint", "uint64", "float64", "duration", "durationSlice", "count":
		return cobra.NoFileCompletions
	}
	return nil
}

// argCompletions are the arguments' completions by command path.
func argCompletions() map[string]cobra.CompletionFunc {
	ids := completing(deliveryIDs)
	apps, appRuns := completing(appIDs), completing(runsOfApp)
	hooks := completing(webhookIDs)
	parked := nth(completing(parkedIDs))
	none := cobra.NoFileCompletions
	m := map[string]cobra.CompletionFunc{
		"deliveries show":      nth(ids),
		"deliveries export":    ids, // ID...
		"deliveries delete":    ids,
		"replay":               nth(ids),
		"apps get":             nth(apps),
		"apps create":          none, // a new id
		"apps push":            nth(afterRequired(dirs)),
		"runs start":           nth(apps),
		"runs list":            nth(apps),
		"webhooks get":         nth(hooks),
		"webhooks update":      nth(hooks),
		"webhooks secret":      nth(hooks),
		"webhooks delete":      hooks, // ID...
		"webhooks create":      none,  // a new id
		"conversations list":   nth(hooks),
		"conversations get":    nth(hooks, completing(conversationIDs)),
		"trigger":              nth(fixed(cand(devhook.EventRunStatus, "the only event type the service sends"))),
		"scenario save":        nth(afterRequired(files)),
		"scenario play":        nth(afterRequired(jsonFiles)),
		"scenario show":        nth(afterRequired(jsonFiles)),
		"send":                 nth(completing(runningPublicURL)),
		"check":                none, // a handler's URL
		"sso":                  none, // a domain or an e-mail address
		"relay parked show":    parked,
		"relay parked drop":    parked,
		"relay parked requeue": parked,
		"gen-docs":             nth(afterRequired(dirs)),
	}
	for _, p := range []string{"runs get", "runs logs", "runs cancel", "runs wait"} {
		m[p] = nth(apps, appRuns)
	}
	return m
}

// flagCompletions are the flags' completions: by "--name" on every command
// that has the flag, or by "path --name" for one command's.
func flagCompletions() map[string]cobra.CompletionFunc {
	statusV2 := fixed(runStatuses()...)
	m := map[string]cobra.CompletionFunc{
		"--data":   dirs,
		"--format": fixed(cand("curl", "a shell script that sends each delivery"), cand("har", "HTTP Archive 1.2"), cand("scenario", "devhook's scenario file")),
		"--verify": fixed(cand("report", "record the verdict"), cand("enforce", "reject failures"), cand("off", "no check")),

		"--status":           completing(receiverStatuses), // deliveries list and delete
		"send --status":      statusV2,
		"runs list --status": statusV2,
		"--status-v2":        statusV2,
		"--verdict":          fixed(verdicts()...),

		"--run":                    completing(runIDs),
		"--run-id":                 completing(runIDs),
		"--id":                     completing(deliveryIDList),
		"deliveries list --before": completing(deliveryIDs),
		"--before":                 cobra.NoFileCompletions, // deliveries delete: an age
		"--remove-header":          completing(deliveryHeaders),
		"--app":                    completing(appIDs),

		"--inspect":        completing(runningInspector),
		"listen --inspect": fixed(cand("off", "no inspector")),
		"listen --relay":   completing(runningRelays),
		"--webhook":        completing(webhookIDs),
		"--team":           completing(teamIDs),
		"emulate --team":   cobra.NoFileCompletions, // ID=NAME
		"--profile":        completing(profileNames),
		"--session":        completing(sessionNames),
		"--channel":        completing(parkedChannels),

		"--instance":       fixed(cand("latest", "the default"), "devint"),
		"--event-type":     fixed(cand(devhook.EventRunStatus, "the only event type")),
		"--expect":         fixed(cand("recorded", "each answer as recorded"), cand("2xx", "any 2xx"), cand("3xx", ""), cand("4xx", ""), cand("5xx", "")),
		"--redact":         fixed(redactPaths()...),
		"--route":          routePrefixes,
		"--acme-directory": fixed(cand("https://acme-v02.api.letsencrypt.org/directory", "Let's Encrypt"), cand("https://acme-staging-v02.api.letsencrypt.org/directory", "Let's Encrypt staging")),
		"--scenario":       jsonFiles,
	}
	for _, name := range []string{"routes", "junit", "body", "input", "out", "forward-ca", "relay-ca", "tls-cert", "tls-key", "nats-creds", "python"} {
		m["--"+name] = files
	}
	// Free text: no list holds the values, and they are no file names.
	for _, name := range []string{"secret", "name", "description", "q", "api-key", "endpoint", "to", "forward", "header",
		"url", "addr", "relay", "relay-addr", "public-url", "relay-token", "open-token", "option", "email", "client-id",
		"oidc-discovery-url", "identity-provider", "callback-addr", "sso-domain", "user-email", "acme-email", "domain",
		"http-addr", "https-addr", "metrics-addr", "nats", "nats-prefix"} {
		m["--"+name] = cobra.NoFileCompletions
	}
	return m
}

// cand is a candidate with its description.
func cand(value, desc string) cobra.Completion {
	if desc == "" {
		return value
	}
	return cobra.CompletionWithDesc(value, oneLine(desc))
}

// oneLine makes s a description: no tabs or line breaks, no control
// characters (a path a sender chose), at most 60 characters.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	return s
}

// valuesFunc finds the candidates for toComplete; ctx bounds it.
type valuesFunc func(ctx context.Context, cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, error)

// completing turns fn into a completion function: bounded by the
// completion deadline, its candidates that start with toComplete in its
// order (newest first), no file names; nothing at all when it fails.
func completing(fn valuesFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, completionTimeout())
		defer cancel()
		out, err := fn(ctx, cmd, args, toComplete)
		if err != nil {
			out = nil
		}
		return startingWith(out, toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	}
}

// fixed offers the candidates, in their order.
func fixed(cands ...cobra.Completion) cobra.CompletionFunc {
	return completing(func(context.Context, *cobra.Command, []string, string) ([]cobra.Completion, error) {
		return cands, nil
	})
}

// startingWith keeps the candidates whose value starts with prefix.
func startingWith(cands []cobra.Completion, prefix string) []cobra.Completion {
	out := cands[:0:0]
	for _, s := range cands {
		if v, _, _ := strings.Cut(s, "\t"); strings.HasPrefix(v, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// nth completes the i-th argument with fns[i], and nothing past them.
func nth(fns ...cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(fns) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fns[len(args)](cmd, args, toComplete)
	}
}

// files, dirs and jsonFiles leave the names to the shell: any file, a
// directory, a *.json file (scenarios).
func files(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveDefault
}

func dirs(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveFilterDirs
}

func jsonFiles(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return []cobra.Completion{"json"}, cobra.ShellCompDirectiveFilterFileExt
}

// afterRequired completes an argument with fn once the command's required
// flags are given. Before, cobra offers those flags, and the shell must
// show them: with fn's directive it would take them for a directory to
// list or an extension to filter on.
func afterRequired(fn cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		missing := false
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && req[0] == "true" && !f.Changed {
				missing = true
			}
		})
		if missing {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fn(cmd, args, toComplete)
	}
}

// routePrefixes offers the kinds of a route's MATCH, to be followed by
// what it matches.
func routePrefixes(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	cands := []cobra.Completion{cand("path:", "path:GLOB -> TARGET"), cand("json:", "json:DOTTED.PATH=VALUE -> TARGET"), cand("header:", "header:NAME=VALUE -> TARGET")}
	return startingWith(cands, toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

func runStatuses() []cobra.Completion {
	var out []cobra.Completion
	for _, s := range devhook.RunStatuses() {
		out = append(out, s)
	}
	return out
}

func verdicts() []cobra.Completion {
	return []cobra.Completion{
		cand(devhook.VerdictOK, "the signature is valid"),
		cand(devhook.VerdictInvalidSignature, "signed with another secret, or the body changed"),
		cand(devhook.VerdictInvalidTime, "t outside the window"),
		cand(devhook.VerdictMissingSignature, "no service-signature header"),
		cand(devhook.VerdictInvalidFormat, "a header that does not parse"),
		cand(devhook.VerdictNoSecret, "no secret to check with"),
		cand(devhook.VerdictUnchecked, "--verify off"),
	}
}

// redactPaths are the JSON paths of a run.status body's data fields, read
// from devhook.RunStatusData so that a new field is offered too.
func redactPaths() []cobra.Completion {
	t := reflect.TypeFor[devhook.RunStatusData]()
	out := make([]cobra.Completion, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, "$.data."+name)
		}
	}
	return out
}

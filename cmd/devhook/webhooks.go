package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/scenario"
)

// cloudCmd is a command of the service's API: its flags, its output and
// its client.
type cloudCmd struct {
	cloudFlags
	stdout, stderr io.Writer
}

// bind returns a RunE that sets the writers, makes the client and calls run.
func (o *cloudCmd) bind(run func(ctx context.Context, c *cloud.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
		c, err := o.client(cmd.Context())
		if err != nil {
			return err
		}
		return run(cmd.Context(), c, args)
	}
}

const cloudHelp = `Each call goes to the service's API at --endpoint with the API key of --api-key. Both
come from the flag, else the environment (SERVICE_ENDPOINT, SERVICE_API_KEY), else the
profile of ~/.service/config.yaml (SERVICE_PROFILE or --profile picks one).`

func newWebhooksCmd() *cobra.Command {
	o := &cloudCmd{}
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "Create, list, change and delete the service's webhooks, and read their secrets",
		Long:  "Webhooks tell the service where to send run.status deliveries.\n\n" + cloudHelp,
		Example: `  devhook webhooks create my-hook --url https://hooks.example.com/c/abc/ --endpoint http://127.0.0.1:4010 --api-key devkey
  devhook webhooks list
  devhook webhooks secret my-hook`,
	}
	o.register(cmd.PersistentFlags(), true)
	cmd.AddCommand(newWebhooksCreateCmd(o), newWebhooksListCmd(o), newWebhooksGetCmd(o),
		newWebhooksUpdateCmd(o), newWebhooksDeleteCmd(o), newWebhooksSecretCmd(o))
	return groupCmd(cmd)
}

type webhookFields struct {
	url         string
	description string
	eventTypes  []string
}

func (w *webhookFields) register(cmd *cobra.Command, defaults bool) {
	f := cmd.Flags()
	f.StringVar(&w.url, "url", "", "endpoint_url: where the service sends deliveries")
	f.StringVar(&w.description, "description", "", "free text")
	def := []string(nil)
	if defaults {
		def = []string{cloud.EventRunStatus}
	}
	f.StringSliceVar(&w.eventTypes, "event-type", def, "event types to subscribe to (the only one is run.status)")
}

func newWebhooksCreateCmd(o *cloudCmd) *cobra.Command {
	w := &webhookFields{}
	cmd := &cobra.Command{
		Use:   "create [ID] --url URL",
		Short: "Create a webhook (ID default: devhook-<random>)",
		Example: `  devhook webhooks create my-hook --url https://hooks.example.com/c/abc/
  devhook webhooks create --url http://127.0.0.1:4041/c/abc/ --description "my laptop"`,
		Args: cobra.MaximumNArgs(1),
	}
	w.register(cmd, true)
	cmd.MarkFlagRequired("url")
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		id := ""
		if len(args) == 1 {
			id = args[0]
		} else {
			id = newWebhookID()
		}
		h, err := c.CreateWebhook(ctx, cloud.WebhookInput{ID: id, EventTypes: w.eventTypes, EndpointURL: w.url, Description: w.description})
		if err != nil {
			return fmt.Errorf("create webhook %s: %w", id, err)
		}
		if o.json {
			return printRaw(o.stdout, h.Raw)
		}
		fmt.Fprintf(o.stdout, "created webhook %s → %s\n", h.ID, h.EndpointURL)
		fmt.Fprintf(o.stdout, "its signing secret: devhook webhooks secret %s\n", shellQuote(h.ID))
		return nil
	})
	return cmd
}

func newWebhooksListCmd(o *cloudCmd) *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List the webhooks", Args: cobra.NoArgs,
		Example: `  devhook webhooks list
  devhook webhooks list --json`}
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, _ []string) error {
		ws, err := c.ListWebhooks(ctx)
		if err != nil {
			return fmt.Errorf("list webhooks: %w", err)
		}
		if o.json {
			return printRaw(o.stdout, ws.Raw)
		}
		if len(ws.Items) == 0 {
			fmt.Fprintln(o.stdout, "no webhooks; create one with: devhook webhooks create --url URL (or devhook listen --register)")
			return nil
		}
		var rows [][]string
		for _, h := range ws.Items {
			rows = append(rows, []string{h.ID, h.EndpointURL, strings.Join(h.EventTypes, ","), h.CreatedAt, h.Description})
		}
		return table(o.stdout, []string{"ID", "ENDPOINT URL", "EVENTS", "CREATED", "DESCRIPTION"}, rows)
	})
	return cmd
}

func printWebhook(w io.Writer, h cloud.Webhook) error {
	return fields(w, "id", h.ID, "endpoint_url", h.EndpointURL, "event_types", strings.Join(h.EventTypes, ","),
		"description", h.Description, "created_at", h.CreatedAt, "updated_at", h.UpdatedAt)
}

func newWebhooksGetCmd(o *cloudCmd) *cobra.Command {
	cmd := &cobra.Command{Use: "get ID", Short: "Show a webhook", Args: cobra.ExactArgs(1),
		Example: `  devhook webhooks get my-hook`}
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		h, err := c.GetWebhook(ctx, args[0])
		if err != nil {
			return fmt.Errorf("get webhook %s: %w", args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, h.Raw)
		}
		return printWebhook(o.stdout, h)
	})
	return cmd
}

func newWebhooksUpdateCmd(o *cloudCmd) *cobra.Command {
	w := &webhookFields{}
	cmd := &cobra.Command{
		Use:   "update ID [--url URL] [--description D] [--event-type T]",
		Short: "Change a webhook; fields not given keep their value",
		Example: `  devhook webhooks update my-hook --url https://hooks.example.com/c/def/
  devhook webhooks update my-hook --description "staging"`,
		Args: cobra.ExactArgs(1),
	}
	w.register(cmd, false)
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		f := cmd.Flags()
		if !f.Changed("url") && !f.Changed("description") && !f.Changed("event-type") {
			return fmt.Errorf("nothing to change: give --url, --description or --event-type")
		}
		h, err := c.GetWebhook(ctx, args[0])
		if err != nil {
			return fmt.Errorf("update webhook %s: %w", args[0], err)
		}
		in := h.Input()
		if f.Changed("url") {
			in.EndpointURL = w.url
		}
		if f.Changed("description") {
			in.Description = w.description
		}
		if f.Changed("event-type") {
			in.EventTypes = w.eventTypes
		}
		h, err = c.UpdateWebhook(ctx, in)
		if err != nil {
			return fmt.Errorf("update webhook %s: %w", args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, h.Raw)
		}
		return printWebhook(o.stdout, h)
	})
	return cmd
}

func newWebhooksDeleteCmd(o *cloudCmd) *cobra.Command {
	cmd := &cobra.Command{Use: "delete ID...", Short: "Delete webhooks and their conversations", Args: cobra.MinimumNArgs(1),
		Example: `  devhook webhooks delete my-hook
  devhook webhooks delete old-hook other-hook`}
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		for _, id := range args {
			if err := c.DeleteWebhook(ctx, id); err != nil {
				return fmt.Errorf("delete webhook %s: %w", id, err)
			}
			if !o.json {
				fmt.Fprintf(o.stdout, "deleted webhook %s\n", id)
			}
		}
		return nil
	})
	return cmd
}

func newWebhooksSecretCmd(o *cloudCmd) *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "secret [ID]",
		Short: "Print a webhook's signing secret (without ID: the webhook of the running devhook listen)",
		Long: `Secret prints a webhook's signing secret, the one its deliveries are signed with and a
receiver verifies them with. Without ID it is the webhook of the devhook listen --register
(or --webhook) that records in --data (default ~/.devhook).`,
		Example: `  devhook listen --forward localhost:8080 --secret "$(devhook webhooks secret my-hook)"
  devhook receive --secret "$(devhook webhooks secret)"`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVar(&dataDir, "data", defaultDataDir(), "without ID: the data directory of the devhook listen whose webhook it is")
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		var id string
		if len(args) == 1 {
			id = args[0]
		} else {
			var err error
			if id, err = listenWebhook(dataDir); err != nil {
				return err
			}
		}
		s, err := c.WebhookSecret(ctx, id)
		if err != nil {
			return fmt.Errorf("get the secret of webhook %s: %w", id, err)
		}
		if o.json {
			return printRaw(o.stdout, s.Raw)
		}
		fmt.Fprintln(o.stdout, s.Secret)
		return nil
	})
	return cmd
}

// listenWebhook is the webhook of the devhook listen recording in dir.
func listenWebhook(dir string) (string, error) {
	l, err := running.Read(dir)
	switch {
	case err == nil && l.Webhook != "":
		return l.Webhook, nil
	case err == nil:
		return "", fmt.Errorf("no ID given, and the devhook listen recording in %s uses no webhook (it runs without --register or --webhook): give the webhook's id (devhook webhooks list)", dir)
	case errors.Is(err, running.ErrStale):
		return "", fmt.Errorf("no ID given, and the devhook listen that recorded in %s (pid %d) is gone: give the webhook's id (devhook webhooks list)", dir, l.PID)
	case errors.Is(err, running.ErrNotRunning):
		return "", fmt.Errorf("no ID given, and no devhook listen records in %s: give the webhook's id (devhook webhooks list), or name the listen's directory with --data", dir)
	}
	return "", fmt.Errorf("no ID given, and %w: give the webhook's id (devhook webhooks list)", err)
}

func newConversationsCmd() *cobra.Command {
	o := &cloudCmd{}
	cmd := &cobra.Command{
		Use:   "conversations",
		Short: "What the service sent to a webhook and what it got back",
		Example: `  devhook conversations list my-hook
  devhook conversations get my-hook CONVERSATION_ID`,
		Long: "Each delivery attempt is a conversation: the request sent and the answer received.\n\n" + cloudHelp,
	}
	o.register(cmd.PersistentFlags(), true)
	list := &cobra.Command{Use: "list WEBHOOK", Short: "List a webhook's conversations, newest first", Args: cobra.ExactArgs(1),
		Example: `  devhook conversations list my-hook --endpoint http://127.0.0.1:4010 --api-key devkey`}
	list.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		cs, err := c.ListConversations(ctx, args[0])
		if err != nil {
			return fmt.Errorf("list the conversations of webhook %s: %w", args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, cs.Raw)
		}
		if len(cs.Items) == 0 {
			fmt.Fprintf(o.stdout, "webhook %s has no conversations yet\n", args[0])
			return nil
		}
		var rows [][]string
		for _, cv := range cs.Items {
			rows = append(rows, []string{cv.ID, cv.CreatedAt, cv.Status, strconv.Itoa(cv.HTTPStatus), errorText(cv.Error)})
		}
		return table(o.stdout, []string{"ID", "CREATED", "STATUS", "HTTP", "ERROR"}, rows)
	})
	get := &cobra.Command{Use: "get WEBHOOK ID", Short: "Show one conversation: the request and the answer", Args: cobra.ExactArgs(2),
		Example: `  devhook conversations get my-hook CONVERSATION_ID --json`}
	get.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		cv, err := c.GetConversation(ctx, args[0], args[1])
		if err != nil {
			return fmt.Errorf("get conversation %s of webhook %s: %w", args[1], args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, cv.Raw)
		}
		dur := ""
		if cv.ResponseDuration != nil {
			dur = strconv.FormatInt(*cv.ResponseDuration, 10) + " ms"
		}
		fields(o.stdout, "id", cv.ID, "webhook", cv.WebhookID, "created_at", cv.CreatedAt, "endpoint_url", cv.EndpointURL,
			"status", cv.Status, "http_status", strconv.Itoa(cv.HTTPStatus), "duration", dur, "error", errorText(cv.Error))
		fmt.Fprintln(o.stdout, "\nrequest body:")
		printRaw(o.stdout, cv.RequestBody)
		fmt.Fprintln(o.stdout, "\nresponse body:")
		fmt.Fprintln(o.stdout, cv.ResponseBody)
		return nil
	})
	cmd.AddCommand(list, get)
	return groupCmd(cmd)
}

func newTriggerCmd() *cobra.Command {
	o := &cloudCmd{}
	var file string
	var speed float64
	cmd := &cobra.Command{
		Use:   "trigger [EVENT_TYPE] [--scenario FILE]",
		Short: "Have the service send one sample event (default run.status), or a scenario's deliveries, to every webhook that subscribes to it",
		Long: cloudHelp + `

--scenario FILE (devhook emulate only: an extension of the trigger, docs/SCENARIOS.md)
sends the deliveries of a scenario saved with devhook scenario save instead of a sample
event: each a POST of its recorded body and headers to every webhook's endpoint_url,
signed with that webhook's secret, waiting the recorded spacing divided by --speed
(0: no waiting). The file is checked first: one that cannot be read ends devhook with
exit status 2, and nothing is sent.`,
		Example: `  devhook trigger --endpoint http://127.0.0.1:4010 --api-key devkey
  devhook trigger run.status
  devhook trigger --scenario run.json --speed 0 --endpoint http://127.0.0.1:4010 --api-key devkey`,
		Args: cobra.MaximumNArgs(1),
	}
	o.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&file, "scenario", "", "send this scenario's deliveries instead of a sample event (devhook emulate only)")
	cmd.Flags().Float64Var(&speed, "speed", 1, "with --scenario: divide the recorded spacing by this; 0 sends without waiting")
	run := o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		ev := cloud.EventRunStatus
		if len(args) == 1 {
			ev = args[0]
		}
		if file != "" {
			return o.triggerScenario(ctx, c, file, speed)
		}
		t, err := c.Trigger(ctx, ev)
		if err != nil {
			return fmt.Errorf("trigger %s: %w", ev, err)
		}
		if o.json {
			return printRaw(o.stdout, t.Raw)
		}
		if t.Webhooks != nil {
			fmt.Fprintf(o.stdout, "triggered %s: sent to %d webhook(s)\n", ev, *t.Webhooks)
		} else {
			fmt.Fprintf(o.stdout, "triggered %s\n", ev)
		}
		return nil
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case file == "" && cmd.Flags().Changed("speed"):
			return errors.New("--speed goes with --scenario")
		case file != "" && len(args) == 1 && args[0] != cloud.EventRunStatus:
			return fmt.Errorf("a scenario's deliveries are %s events, not %s", cloud.EventRunStatus, args[0])
		case speed < 0:
			return fmt.Errorf("--speed %g: give a positive number, or 0 for no waiting", speed)
		}
		if file != "" {
			// Checked before anything is sent, and before the service is asked.
			if _, err := scenario.ReadFile(file); err != nil {
				return &exitError{code: 2, err: err}
			}
		}
		return run(cmd, args)
	}
	return cmd
}

// triggerScenario has the service (devhook emulate) send the deliveries of
// the scenario in file.
func (o *cloudCmd) triggerScenario(ctx context.Context, c *cloud.Client, file string, speed float64) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	t, err := c.TriggerScenario(ctx, b, &speed)
	if err != nil {
		return fmt.Errorf("trigger scenario %s: %w", file, err)
	}
	if t.Deliveries == nil {
		return errors.New("the service does not play scenarios (devhook emulate does): it may have sent a sample event instead")
	}
	if o.json {
		return printRaw(o.stdout, t.Raw)
	}
	hooks := 0
	if t.Webhooks != nil {
		hooks = *t.Webhooks
	}
	fmt.Fprintf(o.stdout, "triggered scenario %s: %d deliveries to each of %d webhook(s)\n", file, *t.Deliveries, hooks)
	if hooks == 0 {
		fmt.Fprintln(o.stderr, "devhook: no webhook subscribes to run.status: nothing is sent (devhook webhooks create --url URL)")
	}
	return nil
}

func errorText(v any) string {
	switch e := v.(type) {
	case nil:
		return ""
	case string:
		return e
	default:
		return fmt.Sprint(e)
	}
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

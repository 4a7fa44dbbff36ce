package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/signature"
)

type sendOptions struct {
	url      string
	secret   string
	status   string
	runID    string
	bodyFile string
	timeout  time.Duration
	inspect  string
	dataDir  string
	stdout   io.Writer
	stderr   io.Writer
}

// sendShown is how much of an answer's body send prints.
const sendShown = 1 << 20

func newSendCmd() *cobra.Command {
	o := &sendOptions{}
	cmd := &cobra.Command{
		Use:   "send [URL] --secret S",
		Short: "Post one signed run.status delivery, as the service would, and print the answer",
		Long: `Send posts one signed run.status delivery to URL, as the service would, and prints the
answer. Without URL it goes to the public URL of the devhook listen that records in --data
(default ~/.devhook), wherever its relay and inspector listen; --inspect ADDR names a listen
by its inspector's address instead.`,
		Example: `  devhook send --secret whsec_demo --status succeeded
  devhook send http://127.0.0.1:4041/c/CHANNEL --secret whsec_demo --run-id run-1
  devhook send http://localhost:8080/hook --secret whsec_demo --body payload.json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if len(args) == 1 {
				o.url = args[0]
			} else {
				u, err := o.listenPublicURL(cmd.Context())
				if err != nil {
					return err
				}
				o.url = u
			}
			if o.secret == "" {
				o.secret = os.Getenv("DEVHOOK_SECRET")
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.secret, "secret", "", "signing secret (or DEVHOOK_SECRET); empty sends no signature header")
	f.StringVar(&o.status, "status", "queued", "status_v2 of the run: "+strings.Join(devhook.RunStatuses(), ", ")+" (a failed or canceled run's delivery carries its error)")
	f.StringVar(&o.runID, "run-id", "", "run id (default: a new one)")
	f.StringVar(&o.bodyFile, "body", "", "send this file's bytes as the body instead")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the answer")
	f.StringVar(&o.dataDir, "data", defaultDataDir(), "without URL: the data directory of the devhook listen to send to")
	f.StringVar(&o.inspect, "inspect", "", "without URL: the inspector address of the devhook listen to send to (default: the listen recording in --data)")
	return cmd
}

// listenPublicURL is the public URL of the devhook listen whose inspector
// answers at --inspect, or else of the one recording in --data.
func (o *sendOptions) listenPublicURL(ctx context.Context) (string, error) {
	if o.inspect != "" {
		c := &inspector.Client{BaseURL: "http://" + o.inspect, HTTP: &http.Client{Timeout: 5 * time.Second}}
		s, err := c.Settings(ctx)
		if err != nil || s.PublicURL == "" {
			return "", fmt.Errorf("no URL given, and no devhook listen answers at %s (start one, or give the public URL it printed)", o.inspect)
		}
		return s.PublicURL, nil
	}
	l, err := running.Read(o.dataDir)
	switch {
	case err == nil:
		return l.PublicURL, nil
	case errors.Is(err, running.ErrStale):
		return "", fmt.Errorf("no URL given, and the devhook listen that recorded in %s (pid %d) is gone: start it again, or give the public URL", o.dataDir, l.PID)
	case errors.Is(err, running.ErrNotRunning):
		return "", fmt.Errorf("no URL given, and no devhook listen records in %s: start one, name its directory with --data, or give the public URL it printed", o.dataDir)
	}
	return "", fmt.Errorf("no URL given, and %w: give the public URL devhook listen printed", err)
}

func (o *sendOptions) run(ctx context.Context) error {
	var body []byte
	if o.bodyFile != "" {
		b, err := os.ReadFile(o.bodyFile)
		if err != nil {
			return fmt.Errorf("read --body: %w", err)
		}
		body = b
	} else {
		if !slices.Contains(devhook.RunStatuses(), o.status) {
			return fmt.Errorf("--status must be one of %s, not %q", strings.Join(devhook.RunStatuses(), ", "), o.status)
		}
		if o.runID == "" {
			o.runID = "run-" + uuid.NewString()[:8]
		}
		b, err := json.Marshal(devhook.NewRunStatus(o.runID, "app-devhook-demo", o.status, time.Now()))
		if err != nil {
			return err
		}
		body = b
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "service-webhooks/1")
	if o.secret != "" {
		req.Header.Set(devhook.SignatureHeader, signature.Sign(o.secret, time.Now(), body))
	}
	resp, err := (&http.Client{Timeout: o.timeout}).Do(req)
	if err != nil {
		return fmt.Errorf("send to %s: %w", o.url, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, sendShown+1))
	more := len(rb) > sendShown
	rb = rb[:min(len(rb), sendShown)]
	fmt.Fprintf(o.stdout, "%s %s\n", resp.Proto, resp.Status)
	keys := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range resp.Header[k] {
			fmt.Fprintf(o.stdout, "%s: %s\n", k, v)
		}
	}
	fmt.Fprintf(o.stdout, "\n%s", rb)
	if len(rb) > 0 && rb[len(rb)-1] != '\n' {
		fmt.Fprintln(o.stdout)
	}
	o.sayCut(resp.Header, more)
	if resp.StatusCode >= 300 {
		return answeredError(resp.Status, resp.Header, rb)
	}
	return nil
}

// sayCut says on standard error that the body printed is not the whole
// answer: devhook listen passed the receiver's answer on cut (h has
// devhook.AnswerCutHeader), or send printed only its first sendShown
// bytes (more).
func (o *sendOptions) sayCut(h http.Header, more bool) {
	if n := h.Get(devhook.AnswerCutHeader); n != "" {
		fmt.Fprintf(o.stderr, "devhook: the receiver's answer was passed on cut: the sender got its first %s bytes, the rest was dropped (%s: %s)\n", n, devhook.AnswerCutHeader, n)
	}
	if more {
		fmt.Fprintf(o.stderr, "devhook: the answer's body is longer than the first %d bytes printed\n", sendShown)
	}
}

// answeredError says who answered a status over 299: devhook's own
// answers say so in devhook.AnswerHeader, with the reason in their first
// line; any other is the receiver's.
func answeredError(status string, h http.Header, body []byte) error {
	reason := strings.TrimSpace(string(body))
	if i := strings.IndexByte(reason, '\n'); i >= 0 {
		reason = reason[:i]
	}
	switch h.Get(devhook.AnswerHeader) {
	case "agent":
		return fmt.Errorf("devhook listen answered %s, not the receiver: %s", status, reason)
	case "relay":
		return fmt.Errorf("the devhook relay answered %s, not the receiver: %s", status, reason)
	}
	return fmt.Errorf("the receiver answered %s", status)
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/hint"
	"github.com/devhook/devhook/signature"
	"github.com/spf13/cobra"
)

// replayOptions are devhook replay's flags.
type replayOptions struct {
	h        historyOptions
	resign   bool
	noResign bool
	to       string
	body     string   // --body FILE, or - for standard input
	headers  []string // --header 'Name: value'
	remove   []string // --remove-header NAME
	edit     bool     // --edit: $VISUAL or $EDITOR on the body
}

func newReplayCmd() *cobra.Command {
	o := &replayOptions{}
	cmd := &cobra.Command{
		Use:   "replay ID",
		Short: "Send a recorded delivery to the receiver again and record the attempt",
		Example: `  devhook replay ID
  devhook replay ID --to http://localhost:9090 --no-resign
  devhook replay ID --edit
  devhook replay ID --body fixed.json --header 'X-Trace: 1' --remove-header User-Agent
  jq '.status_v2 = "failed"' body.json | devhook replay ID --body -`,
		Long: `Replay sends a recorded delivery again (ID: its id, or a start only it has): through the
devhook listen recording in --data when one runs (found by itself; --inspect ADDR names one by
its inspector), else directly from the data directory. By default it is re-signed with a fresh
t when the secret is known, so the receiver's 5-minute window accepts it; without a known
secret the original signature is sent as is. --to URL sends it elsewhere: the delivery's path
and query are appended to URL, as to a --forward target.

Edits. --body FILE sends another body (- reads it from standard input). --edit opens $VISUAL
or $EDITOR (else vi) on the body, the recorded one or --body's, in a temporary file, as git
commit does, and sends the file as saved. The editor exiting with an error (:cq in vim) or an
emptied file aborts the replay: nothing is sent. A body left unchanged is replayed unchanged;
--body /dev/null sends an empty one. A delivery whose recorded body cannot be read is
replayed only with --body, which replaces it whole. A newline the editor adds at the end of a body that had
none is dropped. --header 'Name: value' replaces every value of that header (repeat it for
several values or other headers); --remove-header NAME removes one; names in any case.
Content-Length (the length of the body sent), Host (the target's) and hop-by-hop headers are
not edited. An edited body is re-signed when the secret is known; --no-resign sends it with
its original signature on purpose (a receiver that checks signatures refuses it), and a
service-signature header set or removed by hand is sent as it is, not re-signed. The attempt
is recorded as edited and its line says "(edited, re-signed)" or "(edited, not re-signed)".

Exit status: 0 when the receiver answered 2xx, 1 otherwise (another status, no answer, an
aborted edit).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	o.h.flags(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&o.resign, "resign", false, "sign with a fresh t (needs the secret)")
	fl.BoolVar(&o.noResign, "no-resign", false, "send the original signature as is, an edited body too")
	fl.StringVar(&o.to, "to", "", "send to this receiver instead; the delivery's path and query are appended to it")
	fl.StringVar(&o.h.secret, "secret", "", "signing secret, for re-signing without a running listen (or DEVHOOK_SECRET)")
	fl.StringVar(&o.body, "body", "", "send the bytes of `FILE` as the body (- for standard input)")
	fl.BoolVar(&o.edit, "edit", false, "edit the body in $VISUAL or $EDITOR before sending it")
	fl.StringArrayVar(&o.headers, "header", nil, "replace every value of a header: `'Name: value'`; repeat for several values or headers")
	fl.StringArrayVar(&o.remove, "remove-header", nil, "remove the header `NAME` (any case); repeat for more")
	return cmd
}

func (o *replayOptions) run(cmd *cobra.Command, ref string) error {
	ctx := cmd.Context()
	if o.h.secret == "" {
		o.h.secret = os.Getenv("DEVHOOK_SECRET")
	}
	opt, hdr, err := o.options()
	if err != nil {
		return err
	}
	hist, done, live, err := o.h.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	var d *devhook.Delivery // read first when it is edited
	bodyEdited := false
	if o.editing() {
		d, err = hist.Delivery(ctx, ref)
		// An attempt unreadable: sent all the same; the body unreadable:
		// sent only when --body replaces it (--edit alone edits it).
		if err = devhook.ReplayError(d, err, devhook.ReplayOptions{HasBody: o.body != ""}); err != nil {
			return replayAdvice(err, live, opt)
		}
		ref = d.ID
		if bodyEdited, err = o.applyEdits(cmd, d, hdr, &opt); err != nil {
			return err
		}
	}
	errw := cmd.ErrOrStderr()
	if !live && o.h.secret == "" && opt.Resign == nil {
		if bodyEdited {
			fmt.Fprintf(errw, "devhook: replaying from %s without a secret (--secret or DEVHOOK_SECRET): the edited body goes with its original signature, which does not sign it (--no-resign to mean it)\n", o.h.dataDir)
		} else {
			fmt.Fprintf(errw, "devhook: replaying from %s without a secret (--secret or DEVHOOK_SECRET): sending the original signature as is\n", o.h.dataDir)
		}
	}
	a, err := hist.Replay(ctx, ref, opt)
	if err != nil {
		return replayAdvice(err, live, opt)
	}
	printReplayLine(cmd.OutOrStdout(), &a)
	if live && bodyEdited && opt.Resign == nil && !a.Resigned() {
		fmt.Fprintln(errw, "devhook: the running devhook listen knows no secret: the edited body went with its original signature, which does not sign it")
	}
	return replayOutcome(ctx, errw, hist, d, ref, &a)
}

// options checks the flags and turns them into replay options and the
// edit of the headers.
func (o *replayOptions) options() (devhook.ReplayOptions, agent.HeaderEdit, error) {
	opt := devhook.ReplayOptions{To: o.to}
	var hdr agent.HeaderEdit
	if o.to != "" {
		if _, err := agent.ParseTarget(o.to); err != nil {
			return opt, hdr, fmt.Errorf("--to: %w", err)
		}
	}
	if o.body == "-" && o.edit {
		return opt, hdr, errors.New("--body - and --edit: the editor needs standard input; give the body in a file (--body FILE --edit)")
	}
	set, err := parseHeaders(o.headers)
	if err != nil {
		return opt, hdr, err
	}
	for k := range set {
		if err := agent.CheckEditable(k); err != nil {
			return opt, hdr, fmt.Errorf("--header: %w", err)
		}
	}
	for _, name := range o.remove {
		if err := agent.CheckEditable(strings.TrimSpace(name)); err != nil {
			return opt, hdr, fmt.Errorf("--remove-header: %w", err)
		}
		hdr.Remove = append(hdr.Remove, strings.TrimSpace(name))
	}
	hdr.Set = set
	if _, _, err := hdr.Apply(nil); err != nil { // values; a name both set and removed
		return opt, hdr, fmt.Errorf("--header: %w", err)
	}
	sigEdited := hdr.Touches(devhook.SignatureHeader)
	switch {
	case o.resign && o.noResign:
		return opt, hdr, errors.New("--resign and --no-resign exclude each other")
	case o.resign && sigEdited:
		return opt, hdr, fmt.Errorf("--resign would replace the %s header that --header or --remove-header edits: drop one", devhook.SignatureHeader)
	case o.resign:
		opt.Resign = &o.resign
	case o.noResign || sigEdited:
		// The signature header edited by hand is sent as edited.
		f := false
		opt.Resign = &f
	}
	return opt, hdr, nil
}

// editing reports whether the flags edit the delivery.
func (o *replayOptions) editing() bool {
	return o.body != "" || o.edit || len(o.headers) > 0 || len(o.remove) > 0
}

// applyEdits puts into opt the body and headers the flags make of d, and
// reports whether the body differs from d's.
func (o *replayOptions) applyEdits(cmd *cobra.Command, d *devhook.Delivery, hdr agent.HeaderEdit, opt *devhook.ReplayOptions) (bool, error) {
	body := d.Body
	var err error
	switch o.body {
	case "":
	case "-":
		if body, err = io.ReadAll(cmd.InOrStdin()); err != nil {
			return false, fmt.Errorf("--body -: reading standard input: %w", err)
		}
	default:
		if body, err = os.ReadFile(o.body); err != nil {
			return false, fmt.Errorf("--body: %w", err)
		}
	}
	if o.edit {
		if body, err = editBody(cmd, d, body); err != nil {
			return false, err
		}
	}
	if o.body != "" || o.edit {
		opt.Body, opt.HasBody = body, true
	}
	if len(hdr.Set) > 0 || len(hdr.Remove) > 0 {
		// The edit, not the headers it makes: the agent makes them from
		// the recorded ones, the others byte for byte.
		_, absent, err := hdr.Apply(d.Header)
		if err != nil {
			return false, fmt.Errorf("--header: %w", err)
		}
		for _, name := range absent {
			fmt.Fprintf(cmd.ErrOrStderr(), "devhook: --remove-header %s: delivery %s has no such header\n", name, d.ID)
		}
		opt.SetHeader, opt.RemoveHeader = hdr.Set, hdr.Remove
	}
	// A body that cannot be read is edited by any body sent in its place.
	return d.BodyError != "" || !bytes.Equal(body, d.Body), nil
}

// editBody runs the user's editor on body in a temporary file, as git
// commit does, and returns the file as saved. The editor exiting with an
// error, or an emptied body, aborts; an unchanged one is sent (and said).
func editBody(cmd *cobra.Command, d *devhook.Delivery, body []byte) ([]byte, error) {
	editor, err := editorCommand()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "devhook-replay-"+d.ID[:min(8, len(d.ID))]+"-*"+bodyExt(d))
	if err != nil {
		return nil, fmt.Errorf("--edit: creating the file to edit: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("--edit: writing the body to edit: %w", err)
	}
	errw := cmd.ErrOrStderr()
	fmt.Fprintf(errw, "devhook: waiting for your editor to close %s (exit it with an error or empty the file to abort)\n", f.Name())
	runErr := runEditor(editor, f.Name(), cmd.InOrStdin(), cmd.OutOrStdout(), errw)
	if cmd.Context().Err() != nil {
		return nil, errors.New("replay aborted: interrupted while editing; nothing was sent")
	}
	if runErr != nil {
		return nil, fmt.Errorf("replay aborted: the editor (%s) %s; nothing was sent", editor, exitText(runErr))
	}
	edited, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, fmt.Errorf("--edit: reading the edited body: %w", err)
	}
	edited = dropAddedNewline(body, edited)
	switch {
	case len(edited) == 0 && len(body) > 0:
		return nil, errors.New("replay aborted: the edited body is empty; nothing was sent (--body /dev/null sends an empty body)")
	case bytes.Equal(edited, body):
		fmt.Fprintln(errw, "devhook: the body is unchanged: it is replayed as it was")
	}
	return edited, nil
}

// dropAddedNewline is edited without the line end an editor adds on
// saving (vim, nano) when body, the text it was given, ended without one.
func dropAddedNewline(body, edited []byte) []byte {
	if bytes.HasSuffix(body, []byte("\n")) {
		return edited
	}
	if e, ok := bytes.CutSuffix(edited, []byte("\r\n")); ok && !bytes.HasSuffix(e, []byte("\n")) {
		return e
	}
	if e, ok := bytes.CutSuffix(edited, []byte("\n")); ok && !bytes.HasSuffix(e, []byte("\n")) {
		return e
	}
	return edited
}

// editorCommand is the editor git would choose: $VISUAL unless the
// terminal is dumb, $EDITOR, else vi (notepad on Windows).
func editorCommand() (string, error) {
	dumb := os.Getenv("TERM") == "dumb"
	if v := strings.TrimSpace(os.Getenv("VISUAL")); v != "" && !dumb {
		return v, nil
	}
	if e := strings.TrimSpace(os.Getenv("EDITOR")); e != "" {
		return e, nil
	}
	switch {
	case runtime.GOOS == "windows":
		return "notepad", nil
	case dumb:
		return "", errors.New("--edit: the terminal is dumb and EDITOR is not set: set EDITOR, or give the body with --body FILE")
	}
	return "vi", nil
}

// runEditor runs editor on path with the terminal attached. The editor
// is a shell command, its arguments included ("code --wait"), as git
// runs it.
func runEditor(editor, path string, stdin io.Reader, stdout, stderr io.Writer) error {
	var c *exec.Cmd
	if runtime.GOOS == "windows" {
		args := strings.Fields(editor)
		c = exec.Command(args[0], append(args[1:], path)...)
	} else {
		c = exec.Command("sh", "-c", editor+` "$@"`, editor, path)
	}
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	return c.Run()
}

// exitText says how the editor failed.
func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return "exited with status " + strconv.Itoa(ee.ExitCode())
	}
	return "failed: " + err.Error()
}

// bodyExt is the temporary file's extension, for the editor's syntax.
func bodyExt(d *devhook.Delivery) string {
	ct := strings.ToLower(d.Header.Get("Content-Type"))
	switch {
	case strings.Contains(ct, "json"):
		return ".json"
	case strings.Contains(ct, "xml"):
		return ".xml"
	}
	return ".txt"
}

// printReplayLine prints the attempt in one line: where it went, the
// receiver's status, how it was made, how long it took.
func printReplayLine(w io.Writer, a *devhook.Attempt) {
	fmt.Fprintf(w, "attempt %d → %s  %s", a.Seq, a.Target, statusWord(a.Status))
	switch {
	case a.Edited() && a.Resigned():
		fmt.Fprint(w, "  (edited, re-signed)")
	case a.Edited():
		fmt.Fprint(w, "  (edited, not re-signed)")
	case a.Resigned():
		fmt.Fprint(w, "  (re-signed)")
	}
	fmt.Fprintf(w, "  %s\n", formatDuration(time.Duration(a.Duration)))
}

// replayOutcome is replay's error for attempt a of delivery ref (d, when
// read already): none for a 2xx (with a hint on errw when the receiver
// should not have taken it), else what the receiver answered and what to
// do.
func replayOutcome(ctx context.Context, errw io.Writer, hist history, d *devhook.Delivery, ref string, a *devhook.Attempt) error {
	if a.Status == 0 {
		return fmt.Errorf("replay failed: the receiver gave no status: %s", a.Error)
	}
	ok := a.Status >= 200 && a.Status < 300
	if d == nil && (!ok || a.Edited()) {
		d, _ = hist.Delivery(ctx, ref) // for the hint: none when it cannot be read
	}
	adv := hint.Advise(d, a, hint.Context{})
	if ok {
		if adv.Text != "" {
			fmt.Fprintf(errw, "devhook: hint: %s\n", adv.Text)
		}
		return nil
	}
	msg := fmt.Sprintf("the receiver answered %d%s", a.Status, answerText(a.Body))
	if d != nil && !a.Resigned() && !a.Edited() && a.Status >= 400 && a.Status < 500 {
		if old := signatureAge(d, time.Now()); old > signature.Window {
			return fmt.Errorf("%s; the original signature's t is %s old, past the receiver's %s window: replay with --resign (needs the secret: --secret, or a running devhook listen that knows it)",
				msg, agent.FormatDuration(old.Round(time.Second)), agent.FormatDuration(signature.Window))
		}
	}
	if adv.Text != "" {
		msg += "; " + adv.Text
	}
	return errors.New(msg)
}

// answerText is the start of a receiver's answer, quoted, when it is
// short text: ` "Unauthorized: Invalid signature"`.
func answerText(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if line == "" || !utf8.ValidString(line) || !isText([]byte(line)) {
		return ""
	}
	if len(line) > 120 {
		line = line[:120] + "…"
	}
	return " " + strconv.Quote(line)
}

// signatureAge is how old the t of d's original signature is at now, or 0
// when it has none that parses.
func signatureAge(d *devhook.Delivery, now time.Time) time.Duration {
	p, err := signature.Parse(d.Header.Get(devhook.SignatureHeader))
	if err != nil {
		return 0
	}
	return now.Sub(time.UnixMilli(p.T))
}

// replayAdvice adds to a replay the agent refused which flag changes
// that (none for a delivery whose body cannot be read: refused unless
// --body replaces it): the agent says what is wrong, the command knows
// its flags. --to is checked before, so a refusal with --resign is the
// missing secret, and one without --to is the missing target.
func replayAdvice(err error, live bool, opt devhook.ReplayOptions) error {
	// Its body cannot be read (the store's: offline): never sent.
	if pe := (*devhook.PartialError)(nil); errors.As(err, &pe) {
		return pe.Unsendable("replay")
	}
	if devhook.ErrorCode(err) != devhook.EINVALID {
		return err
	}
	switch {
	case opt.Resign != nil && *opt.Resign && live:
		return fmt.Errorf("%w: the running devhook listen knows no secret; start it with --secret or --register, or replay with --no-resign", err)
	case opt.Resign != nil && *opt.Resign:
		return fmt.Errorf("%w: pass --secret (or DEVHOOK_SECRET), or replay with --no-resign", err)
	case opt.To == "":
		return fmt.Errorf("%w: give one with --to URL", err)
	}
	return err
}

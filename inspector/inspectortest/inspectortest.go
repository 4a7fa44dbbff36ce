// Package inspectortest drives a headless chromium against an inspector, for
// tests in any package: start one browser per test, open tabs, wait for the
// page, read it, write screenshots for a person to look at, and catch the
// files it has the browser download.
//
//	b := inspectortest.NewBrowser(t)   // skips without chromium unless CI is set
//	tab := b.NewTab(t)
//	tab.Run(t, chromedp.Navigate(url), inspectortest.WaitText("#deliveries", "run-1"))
//	tab.Screenshot(t, "list")
//	dl := tab.Download(t, inspectortest.Click("#save-scenario"))   // dl.Name, dl.Body
//
// The browser runs with a fresh profile under t.TempDir(), without network
// services of its own (no QUIC, no background networking, no component
// updates, no sync), so that a test only ever talks to its own servers.
package inspectortest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// DefaultTimeout bounds one Tab.Run.
const DefaultTimeout = 20 * time.Second

// Chromium returns the path of the chromium binary: $DEVHOOK_CHROMIUM,
// /usr/bin/chromium, or chromium, chromium-browser, google-chrome on $PATH.
// When none is found it skips the test, or fails it when $CI is set, since
// CI must run the browser tests.
func Chromium(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("DEVHOOK_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		tb.Fatal("chromium is not installed, and CI is set so the browser tests must run: apt-get install chromium, or set DEVHOOK_CHROMIUM")
	}
	tb.Skip("skipping the browser test: chromium is not installed (apt-get install chromium, or set DEVHOOK_CHROMIUM)")
	return ""
}

// Browser is one headless chromium process.
type Browser struct {
	ctx    context.Context // the browser's first tab; every Tab derives from it
	cancel context.CancelFunc
	output *lockedBuffer
}

// NewBrowser starts chromium and stops it when the test ends. Share one
// Browser between the subtests of a test: starting one takes a second.
func NewBrowser(tb testing.TB) *Browser {
	tb.Helper()
	path := Chromium(tb)
	out := &lockedBuffer{}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(1440, 960),
		chromedp.CombinedOutput(out),
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &Browser{ctx: ctx, output: out, cancel: func() { cancel(); allocCancel() }}
	tb.Cleanup(b.Close)
	// The first call starts the browser, which lives as long as the context
	// of that call: no timeout here (reading the browser's address has one).
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("starting %s: %v\nits output:\n%s", path, err, tail(out.String(), 4000))
	}
	return b
}

// Close stops the browser and waits for it to exit.
func (b *Browser) Close() {
	b.cancel()
}

// Tab is one page of a Browser. Uncaught JavaScript exceptions and console
// messages are kept, so that a test can fail on them and show them.
type Tab struct {
	Ctx context.Context

	mu         sync.Mutex
	exceptions []string
	console    []string
}

// NewTab opens a tab that closes when the test ends.
func (b *Browser) NewTab(tb testing.TB) *Tab {
	tb.Helper()
	t := &Tab{}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(t.record))
	t.Ctx = ctx
	tb.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("opening a browser tab: %v", err)
	}
	return t
}

// record runs on the tab's reading goroutine: it must return fast.
func (t *Tab) record(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg := ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil && ev.ExceptionDetails.Exception.Description != "" {
			msg = ev.ExceptionDetails.Exception.Description
		}
		t.mu.Lock()
		t.exceptions = append(t.exceptions, msg)
		t.mu.Unlock()
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		t.mu.Lock()
		t.console = append(t.console, string(ev.Type)+": "+strings.Join(parts, " "))
		t.mu.Unlock()
	}
}

// Exceptions returns the uncaught JavaScript exceptions so far.
func (t *Tab) Exceptions() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.exceptions...)
}

// Console returns the console messages so far.
func (t *Tab) Console() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.console...)
}

// Run runs actions in order within DefaultTimeout and fails the test on an
// error, showing the page's location, exceptions and console.
func (t *Tab) Run(tb testing.TB, actions ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	if _, err := Get(t, DefaultTimeout, chromedp.Steps(actions...)); err != nil {
		tb.Fatalf("in the browser: %v\n%s", err, t.Diagnostics())
	}
}

// Eval evaluates a JavaScript expression in the page and fails the test on
// an error.
func Eval[T any](tb testing.TB, t *Tab, expr string) T {
	tb.Helper()
	v, err := Get(t, DefaultTimeout, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.Fatalf("evaluating %s in the browser: %v\n%s", expr, err, t.Diagnostics())
	}
	return v
}

// Get runs one action within timeout and returns its value.
func Get[T any](t *Tab, timeout time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(t.Ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("gave up after %v: %w", timeout, err)
	}
	return v, err
}

// Diagnostics describes the page: its location, uncaught exceptions and
// console messages.
func (t *Tab) Diagnostics() string {
	var sb strings.Builder
	if loc, err := Get(t, 3*time.Second, chromedp.Location()); err == nil {
		fmt.Fprintf(&sb, "page: %s\n", loc)
	}
	for _, e := range t.Exceptions() {
		fmt.Fprintf(&sb, "exception: %s\n", e)
	}
	for _, c := range t.Console() {
		fmt.Fprintf(&sb, "console %s\n", c)
	}
	return sb.String()
}

// WaitText waits until the text of the first element matching the CSS
// selector sel contains want.
func WaitText(sel, want string) chromedp.Action[chromedp.Void] {
	return WaitJS(fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.textContent.includes(%s); })()`, jsString(sel), jsString(want)),
		fmt.Sprintf("%s to contain %q", sel, want))
}

// WaitCount waits until exactly n elements match the CSS selector sel.
func WaitCount(sel string, n int) chromedp.Action[chromedp.Void] {
	return WaitJS(fmt.Sprintf(`document.querySelectorAll(%s).length === %d`, jsString(sel), n),
		fmt.Sprintf("%d elements matching %s", n, sel))
}

// WaitSelector waits until an element matches the CSS selector sel.
func WaitSelector(sel string) chromedp.Action[chromedp.Void] {
	return WaitJS(fmt.Sprintf(`document.querySelector(%s) !== null`, jsString(sel)), sel)
}

// Click clicks the first element matching the CSS selector sel, once it is
// visible.
func Click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)
}

// WaitJS polls the boolean JavaScript expression expr until it is true.
// what names the condition in the error.
func WaitJS(expr, what string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(DefaultTimeout))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := poll(ctx, t); err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", what, err)
		}
		return chromedp.Void{}, nil
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// OutputDir returns the folder for screenshots: $DEVHOOK_TEST_OUTPUT, or
// devhook-screens under the system's temporary folder. It is created, and
// its path logged once per call.
func OutputDir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("DEVHOOK_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "devhook-screens")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("creating the screenshot folder: %v", err)
	}
	return dir
}

// fileName keeps letters, digits, dot, dash and underscore of name.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
}

// Screenshot writes a full-page PNG of the tab as <OutputDir>/<name>.png
// and returns its path.
func (t *Tab) Screenshot(tb testing.TB, name string) string {
	tb.Helper()
	// From the top, so that sticky headers sit where a person expects them.
	if _, err := Get(t, DefaultTimeout, chromedp.Evaluate[bool](`(window.scrollTo(0, 0), true)`)); err != nil {
		tb.Fatalf("scrolling to the top for screenshot %s: %v", name, err)
	}
	png, err := Get(t, DefaultTimeout, chromedp.FullScreenshot(100))
	if err != nil {
		tb.Fatalf("taking screenshot %s: %v", name, err)
	}
	path := filepath.Join(OutputDir(tb), fileName(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.Fatalf("writing screenshot %s: %v", path, err)
	}
	tb.Logf("screenshot: %s", path)
	return path
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

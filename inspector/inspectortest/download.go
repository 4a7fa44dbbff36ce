package inspectortest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// Download is a file the page had the browser download.
type Download struct {
	URL  string // the address it came from
	Name string // the file name the browser chose (Content-Disposition, the link's download attribute)
	Body []byte
}

// Download runs action, a click on a download link say, and waits for the
// one download it starts to complete. The browser saves it, as a person's
// would, into a folder under tb.TempDir() (Browser.setDownloadBehavior);
// the test gets its bytes. A download that fails or is cancelled fails
// the test.
func (t *Tab) Download(tb testing.TB, action chromedp.Action[chromedp.Void]) Download {
	tb.Helper()
	ctx, cancel := context.WithTimeout(t.Ctx, DefaultTimeout)
	defer cancel()
	dir := tb.TempDir()

	var (
		mu       sync.Mutex
		begun    *browser.EventDownloadWillBegin
		progress = map[string]browser.DownloadProgressState{}
		changed  = make(chan struct{}, 1)
	)
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		switch ev := ev.(type) {
		case *browser.EventDownloadWillBegin:
			if begun == nil {
				begun = ev
			}
		case *browser.EventDownloadProgress:
			progress[ev.GUID] = ev.State
		}
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		tb.Fatalf("listening for downloads: %v", err)
	}
	_, err = chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior:      browser.SetDownloadBehaviorBehaviorAllowAndName,
		DownloadPath:  dir,
		EventsEnabled: new(true),
	})
	if err != nil {
		tb.Fatalf("allowing downloads into %s: %v", dir, err)
	}
	if _, err := chromedp.Run(ctx, action); err != nil {
		tb.Fatalf("in the browser, starting a download: %v\n%s", err, t.Diagnostics())
	}
	for {
		mu.Lock()
		var d *browser.EventDownloadWillBegin
		var state browser.DownloadProgressState
		if begun != nil {
			d, state = begun, progress[begun.GUID]
		}
		mu.Unlock()
		switch state {
		case browser.DownloadProgressStateCompleted:
			// allowAndName saves the file under its GUID.
			body, err := os.ReadFile(filepath.Join(dir, d.GUID))
			if err != nil {
				tb.Fatalf("reading the download of %s: %v", d.URL, err)
			}
			return Download{URL: d.URL, Name: d.SuggestedFilename, Body: body}
		case browser.DownloadProgressStateCanceled:
			tb.Fatalf("the browser cancelled the download of %s (an error answer?)\n%s", d.URL, t.Diagnostics())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			what := "no download began"
			if d != nil {
				what = fmt.Sprintf("the download of %s did not complete (state %q)", d.URL, state)
			}
			tb.Fatalf("after %v: %s\n%s", DefaultTimeout, what, t.Diagnostics())
		}
	}
}

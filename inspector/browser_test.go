package inspector_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector/inspectortest"
	"github.com/devhook/devhook/scenario"
)

// TestInBrowser drives the page in headless chromium against an inspector
// over a real store. The subtests share one browser and run in order.
func TestInBrowser(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	f := newFixture(t, fixtureOptions{})
	t.Logf("screenshots go to %s", inspectortest.OutputDir(t))

	// History: a full run, a badly signed delivery and some noise.
	base := time.Now().Add(-20 * time.Minute)
	seq := 0
	add := func(at time.Time, body []byte, sign bool, status int) *devhook.Delivery {
		seq++
		d := newDelivery(at, seq, body, sign)
		put(t, f.DB, d, status)
		return d
	}
	for i := range 12 {
		add(base.Add(time.Duration(i)*time.Second), runStatusBody(t, "run-old-"+string(rune('a'+i%4)), inspectorStep(i), base), i%4 != 1, 200)
	}
	runStart := base.Add(5 * time.Minute)
	queued := add(runStart, runStatusBody(t, "run-tl", "queued", runStart), true, 200)
	add(runStart.Add(1200*time.Millisecond), runStatusBody(t, "run-tl", "running", runStart), true, 200)
	add(runStart.Add(9*time.Second), runStatusBody(t, "run-tl", "succeeded", runStart), true, 200)
	// A delivery whose signature does not match.
	seq++
	bad := newDelivery(base.Add(6*time.Minute+time.Second), seq, runStatusBody(t, "run-bad", "queued", base), false)
	bad.Header.Set(devhook.SignatureHeader, "t="+jsonNumber(base.UnixMilli())+",v1=0000")
	bad.Verdict = devhook.Verdict{Result: devhook.VerdictInvalidSignature, Reason: "the v1 signature does not match the body signed with the secret", Status: 401, Text: "Unauthorized: Invalid signature"}
	put(t, f.DB, bad, 401)

	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/"),
		inspectortest.WaitJS(`document.body.dataset.live === "1"`, "the live stream to connect"),
		inspectortest.WaitCount("#deliveries tbody tr", 16),
		inspectortest.WaitText("#settings-strip", "secret known"),
	)

	t.Run("live delivery appears without reload", func(t *testing.T) {
		inspectortest.Eval[bool](t, tab, `(window.__sameDocument = "yes", true)`)
		at := time.Now()
		d := newDelivery(at, 1000, runStatusBody(t, "run-live", "queued", at), true)
		s := put(t, f.DB, d, 0)
		f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: s})
		row := `#deliveries tbody tr[data-id="` + d.ID + `"]`
		tab.Run(t,
			inspectortest.WaitSelector(row),
			inspectortest.WaitJS(`document.querySelector("#deliveries tbody tr").dataset.id === "`+d.ID+`"`, "the new row to be first"),
			inspectortest.WaitText(row, "pending"),
		)
		// The answer arrives: the row updates in place.
		a, err := f.DB.AddAttempt(d.ID, devhook.Attempt{Kind: devhook.AttemptForward, Target: f.Receiver.URL, StartedAt: at, Status: 202, Duration: devhook.Duration(3 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := f.DB.Delivery(d.ID)
		f.Server.Publish(devhook.Change{Kind: devhook.ChangeAttempt, Summary: got.Summarize(), Attempt: &a})
		tab.Run(t, inspectortest.WaitSelector(row+` .badge.status[data-status="202"]`))
		if same := inspectortest.Eval[string](t, tab, `window.__sameDocument || "reloaded"`); same != "yes" {
			t.Fatalf("the page reloaded: %s", same)
		}
		for _, want := range []string{"POST", "/hooks/service", "queued", "valid signature", "202", "3.0 ms"} {
			tab.Run(t, inspectortest.WaitText(row, want))
		}
		tab.Screenshot(t, "inspector-list")
	})

	t.Run("filters", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/?verdict=invalid_signature"),
			inspectortest.WaitCount("#deliveries tbody tr", 1),
			inspectortest.WaitText("#deliveries tbody", "invalid signature"),
			chromedp.Navigate(f.HTTP.URL+"/#/?run_id=run-tl"),
			inspectortest.WaitCount("#deliveries tbody tr", 3),
		)
	})

	t.Run("older deliveries load page by page", func(t *testing.T) {
		older := base.Add(-time.Hour)
		for i := range 45 {
			put(t, f.DB, newDelivery(older.Add(time.Duration(i)*time.Second), 500+i, runStatusBody(t, "run-page", "queued", older), true), 200)
		}
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/?status_v2=queued"),
			chromedp.Navigate(f.HTTP.URL+"/#/"),
			inspectortest.WaitCount("#deliveries tbody tr", 50),
			inspectortest.Click("#load-more"),
			inspectortest.WaitCount("#deliveries tbody tr", 62),
			inspectortest.WaitText(".more", "End of history"),
		)
		ids := inspectortest.Eval[[]string](t, tab, `Array.from(document.querySelectorAll("#deliveries tbody tr")).map(e => e.dataset.id)`)
		for i := 1; i < len(ids); i++ {
			if ids[i] >= ids[i-1] {
				t.Fatalf("rows %d and %d are not newest first: %s, %s", i-1, i, ids[i-1], ids[i])
			}
		}
	})

	t.Run("detail shows the verdict and the pretty body", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/"),
			inspectortest.WaitSelector(`#deliveries tr[data-id="`+bad.ID+`"]`),
			inspectortest.Click(`#deliveries tr[data-id="`+bad.ID+`"] td.path a`),
			inspectortest.WaitText("#signature", "invalid signature"),
			inspectortest.WaitText("#verdict-reason", "does not match"),
			inspectortest.WaitText("#reference-text", "Unauthorized: Invalid signature"),
			inspectortest.WaitText(`pre[data-body="request"]`, "\n  \"data\": {\n    \"run_id\": \"run-bad\""),
			inspectortest.WaitJS(`document.querySelector('pre[data-body="request"]').dataset.mode === "pretty"`, "the pretty view"),
			// Raw view: the bytes as they came.
			inspectortest.Click(`[data-viewer="request"] .seg-btn[data-mode="raw"]`),
			inspectortest.WaitText(`pre[data-body="request"]`, `{"event_type":"run.status","api_version":"2024-03-04"`),
		)
	})

	// Issue 30: where the signature failed, a re-signed replay carries a
	// new, valid signature; the page says so and offers the replay as it
	// arrived first.
	t.Run("a failed signature offers the replay as it arrived first", func(t *testing.T) {
		tab.Run(t,
			inspectortest.WaitText("#replay-asis", "Replay as it arrived"),
			inspectortest.WaitText("#replay", "Replay with a new valid signature"),
			inspectortest.WaitText("#replay-hint", "A replay re-signed carries a new, valid signature"),
			// status beside status_v2, explained.
			inspectortest.WaitText("#status-note", "status running is the legacy field, which the first delivery of a run fills with running: read status_v2"),
			inspectortest.WaitJS(`document.querySelector("#replay-panel .actions button").id === "replay-asis"`, "the replay as it arrived to come first"),
			inspectortest.WaitJS(`document.querySelector("#replay-asis").classList.contains("primary") && !document.querySelector("#replay").classList.contains("primary")`, "the replay as it arrived to be the main button"),
		)
		tab.Screenshot(t, "inspector-replay-failed-signature")
		// A delivery whose signature was valid keeps the re-signed replay first.
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/d/"+queued.ID),
			inspectortest.WaitText("#replay", "Replay (re-signed)"),
			inspectortest.WaitJS(`document.querySelector("#replay-panel .actions button").id === "replay"`, "the re-signed replay to come first"),
		)
	})

	t.Run("replay adds an attempt the receiver saw", func(t *testing.T) {
		before := len(f.Receiver.requests())
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/d/"+queued.ID),
			inspectortest.WaitCount("#attempts .attempt", 1),
			inspectortest.WaitText("#replay", "Replay (re-signed)"),
			inspectortest.Click("#replay"),
			inspectortest.WaitCount("#attempts .attempt", 2),
			inspectortest.WaitText(`#attempts .attempt[data-seq="2"]`, "replay"),
			inspectortest.WaitText(`#attempts .attempt[data-seq="2"]`, "re-signed"),
			inspectortest.WaitText(`#attempts .attempt[data-seq="2"] .badge.status`, "200"),
		)
		got := f.Receiver.requests()
		if len(got) != before+1 {
			t.Fatalf("the receiver saw %d requests, want %d", len(got), before+1)
		}
		if r := got[len(got)-1]; string(r.Body) != string(queued.Body) || r.Header.Get(devhook.SignatureHeader) == queued.Header.Get(devhook.SignatureHeader) {
			t.Errorf("the receiver saw %s with signature %q; want the stored body, re-signed", r.Body, r.Header.Get(devhook.SignatureHeader))
		}
		stored, err := f.DB.Delivery(queued.ID)
		if err != nil || len(stored.Attempts) != 2 || stored.Attempts[1].Kind != devhook.AttemptReplay {
			t.Fatalf("stored attempts: %+v, %v", stored, err)
		}

		// Edit and replay: a changed body, re-signed (the default).
		tab.Run(t,
			inspectortest.WaitText(`#attempts .attempt[data-seq="2"] .chip.made`, "re-signed"),
			inspectortest.Click("#replay-edit"),
			inspectortest.WaitSelector("#replay-editor:not([hidden])"),
			chromedp.SetValue(chromedp.CSS("#edit-body"), `{"edited":"by hand"}`),
			inspectortest.Click("#replay-send"),
			inspectortest.WaitCount("#attempts .attempt", 3),
			inspectortest.WaitText(`#attempts .attempt[data-seq="3"] .chip.made`, "edited, re-signed"),
		)
		got = f.Receiver.requests()
		if r := got[len(got)-1]; string(r.Body) != `{"edited":"by hand"}` {
			t.Errorf("the receiver saw %q after the edit", r.Body)
		}
		// Not re-signed: the label says so, and the receiver that took
		// the edited body with its original signature does not check
		// signatures.
		tab.Run(t,
			inspectortest.Click("#replay-edit"),
			inspectortest.WaitSelector("#replay-editor:not([hidden])"),
			chromedp.SetValue(chromedp.CSS("#edit-body"), `{"edited":"not signed"}`),
			inspectortest.Click("#edit-resign"),
			inspectortest.Click("#replay-send"),
			inspectortest.WaitCount("#attempts .attempt", 4),
			inspectortest.WaitText(`#attempts .attempt[data-seq="4"] .chip.made.warn`, "edited, not re-signed"),
			inspectortest.WaitText(`#attempts .attempt[data-seq="4"] .refusal-hint`, "accepted an edited body sent with its original signature"),
			inspectortest.WaitText(`#attempts .attempt[data-seq="4"] .sent summary`, "Request as sent (edited, not re-signed)"),
		)

		// Compare two attempts side by side.
		tab.Run(t,
			inspectortest.Click(`.attempt[data-seq="1"] .cmp-box`),
			inspectortest.Click(`.attempt[data-seq="3"] .cmp-box`),
			inspectortest.WaitSelector("#compare .diff-grid"),
			inspectortest.WaitText("#compare", "#1 forward"),
			inspectortest.WaitText("#compare", "#3 replay"),
		)
		tab.Screenshot(t, "inspector-detail")

		// Copy as curl: to the clipboard, or, when the browser refuses it, into a box to copy from.
		tab.Run(t,
			inspectortest.Click("#copy-curl"),
			inspectortest.WaitJS(`(document.querySelector("#toast") || {}).textContent === "curl command copied" ||
				!!document.querySelector("textarea.copy-fallback")`, "the curl command to be copied"),
		)
		if inspectortest.Eval[bool](t, tab, `!!document.querySelector("textarea.copy-fallback")`) {
			cmd := inspectortest.Eval[string](t, tab, `document.querySelector("textarea.copy-fallback").value`)
			if !strings.Contains(cmd, "curl -q -sS -i --http1.1 --path-as-is -g -X 'POST' '"+f.Receiver.URL+"/hooks/service'") {
				t.Errorf("curl command = %s", cmd)
			}
		}
	})

	t.Run("a run's three deliveries show as one timeline", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/runs"),
			inspectortest.WaitSelector(`#runs tr[data-run="run-tl"]`),
			inspectortest.Click(`#runs tr[data-run="run-tl"] a`),
			inspectortest.WaitCount("#timeline .step.done", 3),
			inspectortest.WaitCount("#run-deliveries tbody tr", 3),
			inspectortest.WaitText("#run-issues", "All three steps arrived in order"),
		)
		steps := inspectortest.Eval[[]string](t, tab, `Array.from(document.querySelectorAll("#timeline .step")).map(e => e.dataset.step)`)
		if strings.Join(steps, ",") != "queued,running,succeeded" {
			t.Errorf("steps = %v", steps)
		}
		gaps := inspectortest.Eval[[]string](t, tab, `Array.from(document.querySelectorAll("#timeline .gap")).map(e => e.textContent)`)
		if len(gaps) != 2 || gaps[0] != "+1.20 s" || gaps[1] != "+7.80 s" {
			t.Errorf("gaps = %q, want +1.20 s and +7.80 s", gaps)
		}
		tab.Screenshot(t, "inspector-run")

		// An out-of-order run is flagged.
		at := time.Now()
		put(t, f.DB, newDelivery(at, 2000, runStatusBody(t, "run-odd", "succeeded", at), true), 200)
		put(t, f.DB, newDelivery(at.Add(time.Second), 2001, runStatusBody(t, "run-odd", "queued", at), true), 200)
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/runs/run-odd"),
			inspectortest.WaitText("#run-issues", "queued arrived after succeeded"),
			inspectortest.WaitText("#run-issues", "no running delivery arrived"),
			inspectortest.WaitSelector(`#timeline .step.missing[data-step="running"]`),
		)
		tab.Screenshot(t, "inspector-run-out-of-order")

		// A gap with a part of a millisecond reads the same in the
		// timeline and in the table: 589.2 ms from .9 ms past a millisecond
		// is +589 ms in both (whole milliseconds of the two times would
		// make it +590 ms).
		at = time.Now().Add(-time.Minute).Truncate(time.Second).Add(900 * time.Microsecond)
		put(t, f.DB, newDelivery(at, 2100, runStatusBody(t, "run-round", "queued", at), true), 200)
		put(t, f.DB, newDelivery(at.Add(589200*time.Microsecond), 2101, runStatusBody(t, "run-round", "running", at), true), 200)
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/runs/run-round"),
			inspectortest.WaitCount("#run-deliveries tbody tr", 2),
		)
		gaps = inspectortest.Eval[[]string](t, tab, `[document.querySelector("#timeline .gap").textContent, document.querySelectorAll("#run-deliveries tbody tr")[1].children[2].textContent]`)
		if gaps[0] != "+589 ms" || gaps[1] != "+589 ms" {
			t.Errorf("the timeline says %q and the table %q for one gap of 589.2 ms; want +589 ms both", gaps[0], gaps[1])
		}
	})

	t.Run("save as scenario", func(t *testing.T) {
		// On a run's timeline: the run's deliveries, as devhook scenario save --run writes them.
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/runs/run-tl"),
			inspectortest.WaitCount("#run-deliveries tbody tr", 3),
			inspectortest.WaitText("#save-scenario", "Save as scenario"),
		)
		tab.Screenshot(t, "inspector-run-save-scenario")
		dl := tab.Download(t, inspectortest.Click("#save-scenario"))
		if want := savedByCLI(t, storeHistory{f}, scenario.Selection{RunID: "run-tl"}); !bytes.Equal(dl.Body, want) {
			t.Errorf("the run's download from %s differs from devhook scenario save --run run-tl:\n%s\nwant:\n%s", dl.URL, dl.Body, want)
		}
		if dl.Name != "scenario-run-tl.json" {
			t.Errorf("the run's download is named %q", dl.Name)
		}

		// On the list: ticking rows opens nothing, and offers to save them.
		row := func(id string) string { return `#deliveries tr[data-id="` + id + `"]` }
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/"),
			inspectortest.WaitSelector(row(bad.ID)),
			inspectortest.WaitSelector(row(queued.ID)),
			inspectortest.WaitJS(`document.querySelector("#selection-bar").hidden`, "no selection bar before a row is ticked"),
			inspectortest.Click(row(bad.ID)+" .pick-box"),
			inspectortest.Click(row(queued.ID)+" td.pick"), // the box's cell ticks it too
			inspectortest.WaitText("#selection-count", "2 deliveries selected"),
		)
		if hash := inspectortest.Eval[string](t, tab, `location.hash`); hash != "#/" {
			t.Fatalf("ticking rows went to %s", hash)
		}
		// The live stream redraws a ticked row, and adds one: the selection stays.
		got, err := f.DB.Delivery(queued.ID)
		if err != nil {
			t.Fatal(err)
		}
		f.Server.Publish(devhook.Change{Kind: devhook.ChangeAttempt, Summary: got.Summarize()})
		at := time.Now()
		live := newDelivery(at, 2500, runStatusBody(t, "run-live-2", "queued", at), true)
		f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: put(t, f.DB, live, 200)})
		tab.Run(t,
			inspectortest.WaitSelector(row(queued.ID)+".fresh .pick-box:checked"),
			inspectortest.WaitSelector(row(live.ID)+" .pick-box:not(:checked)"),
			inspectortest.WaitCount("#deliveries .pick-box:checked", 2),
			inspectortest.WaitText("#selection-count", "2 deliveries selected"),
			inspectortest.WaitJS(`document.querySelector("#select-all").indeterminate`, "the header's box to say some rows are ticked"),
		)
		tab.Screenshot(t, "inspector-list-selection")
		dl = tab.Download(t, inspectortest.Click("#save-selection"))
		if want := savedByCLI(t, storeHistory{f}, scenario.Selection{IDs: []string{bad.ID, queued.ID}}); !bytes.Equal(dl.Body, want) {
			t.Errorf("the selection's download from %s differs from devhook scenario save --id:\n%s\nwant:\n%s", dl.URL, dl.Body, want)
		}
		if dl.Name != "scenario-2-deliveries.json" {
			t.Errorf("the selection's download is named %q", dl.Name)
		}

		// Every row shown, then none.
		n := inspectortest.Eval[int](t, tab, `document.querySelectorAll("#deliveries tbody tr").length`)
		tab.Run(t,
			inspectortest.Click("#select-all"),
			inspectortest.WaitCount("#deliveries .pick-box:checked", n),
			inspectortest.WaitText("#selection-count", fmt.Sprintf("%d deliveries selected", n)),
			inspectortest.Click("#clear-selection"),
			inspectortest.WaitCount("#deliveries .pick-box:checked", 0),
			inspectortest.WaitJS(`document.querySelector("#selection-bar").hidden && !document.querySelector("#select-all").checked`, "the selection to be cleared"),
		)
	})

	t.Run("request content is never run as HTML", func(t *testing.T) {
		const payload = `<script>window.pwned = "script"; document.title = "pwned"</script><img src=x onerror="window.pwned='img'">`
		at := time.Now()
		d := newDelivery(at, 3000, []byte(payload), true)
		d.Path = `/hooks/<img src=x onerror="window.pwned='path'">`
		d.Header.Set("X-Note", `<b onmouseover="window.pwned='header'">bold</b>`)
		d.Header.Set("Content-Type", "text/html")
		s := put(t, f.DB, d, 200)
		f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: s})
		title := inspectortest.Eval[string](t, tab, `document.title`)
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/"),
			inspectortest.WaitSelector(`#deliveries tr[data-id="`+d.ID+`"]`),
			inspectortest.WaitText(`#deliveries tr[data-id="`+d.ID+`"]`, `<img src=x`),
			chromedp.Navigate(f.HTTP.URL+"/#/d/"+d.ID),
			inspectortest.WaitText(`pre[data-body="request"]`, "<script>window.pwned"),
			inspectortest.WaitText("#view", `<b onmouseover=`),
			inspectortest.WaitText(".req-line", `onerror="window.pwned='path'"`),
		)
		pwned := inspectortest.Eval[string](t, tab, `String(window.pwned)`)
		nodes := inspectortest.Eval[int](t, tab, `document.querySelectorAll("#view script, #view img, #view b, #deliveries img").length`)
		if pwned != "undefined" || nodes != 0 || inspectortest.Eval[string](t, tab, `document.title`) != title {
			t.Errorf("request content ran as HTML: window.pwned=%s, %d foreign elements, title %q", pwned, nodes, inspectortest.Eval[string](t, tab, `document.title`))
		}
	})

	t.Run("a valid delivery the receiver refused carries the hint", func(t *testing.T) {
		at := time.Now()
		d := newDelivery(at, 4000, runStatusBody(t, "run-refused", "queued", at), true)
		put(t, f.DB, d, 0)
		if _, err := f.DB.AddAttempt(d.ID, devhook.Attempt{Kind: devhook.AttemptForward, Target: f.Receiver.URL + d.Path, StartedAt: at,
			Status: 401, Body: []byte("Unauthorized: Invalid Time Value")}); err != nil {
			t.Fatal(err)
		}
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/d/"+d.ID),
			inspectortest.WaitText("#refusal-hint", "your receiver refused a delivery whose signature is valid"),
			inspectortest.WaitText("#refusal-hint code", "devhook check "+f.Receiver.URL+d.Path),
			inspectortest.WaitText("#attempts .refusal-hint", "t as seconds"),
		)
		tab.Screenshot(t, "inspector-refusal-hint")
	})

	t.Run("settings", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/settings"),
			inspectortest.WaitText("#public-url", "https://relay.example.test/c/ch-test"),
			inspectortest.WaitText("#view", f.Receiver.URL),
			inspectortest.WaitText("#view", "known"),
		)
		if strings.Contains(inspectortest.Eval[string](t, tab, `document.body.textContent`), testSecret) {
			t.Error("the page shows the secret")
		}
	})

	if ex := tab.Exceptions(); len(ex) != 0 {
		t.Errorf("the page threw: %q", ex)
	}
}

func inspectorStep(i int) string {
	return []string{"queued", "running", "succeeded"}[i%3]
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

package inspector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/inspector/inspectortest"
	"github.com/devhook/devhook/scenario"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// partialFixture is an inspector over a store holding a delivery whose
// body file is gone (removed by hand, or a store copied without its
// directory of body files), its first attempt damaged (a bit flipped)
// and its second whole, and another delivery whole.
func partialFixture(t *testing.T) (f *fixture, broken, whole *devhook.Delivery) {
	t.Helper()
	return partialFixtureOf(t, []byte(`{"big":"`+strings.Repeat("x", 2000)+`"}`), []byte(`{"small":1}`), fixtureOptions{})
}

// partialFixtureOf is partialFixture with these bodies: brokenBody must be
// large enough for a body file (storage.BodyFileMin), wholeBody small
// enough to be kept in the store's file; o's path is the fixture's.
func partialFixtureOf(t *testing.T, brokenBody, wholeBody []byte, o fixtureOptions) (f *fixture, broken, whole *devhook.Delivery) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	broken = newDelivery(at, 1, brokenBody, true)
	whole = newDelivery(at.Add(time.Second), 2, wholeBody, true)
	put(t, db, broken, 502)
	put(t, db, broken, 500)
	put(t, db, whole, 200)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(path + ".bodies"); err != nil {
		t.Fatal(err)
	}
	damageAttempt(t, path, broken.ID, 1)
	o.path = path
	return newFixture(t, o), broken, whole
}

// damageAttempt flips a bit in the middle of attempt seq of delivery id
// in the closed store path: it fails its checksum.
func damageAttempt(t *testing.T, path, id string, seq uint32) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("attempts"))
		k := binary.BigEndian.AppendUint32(append([]byte(id), 0), seq)
		v := append([]byte{}, b.Get(k)...)
		if len(v) < 20 {
			t.Fatalf("attempt %d of %s: %d bytes", seq, id, len(v))
		}
		v[len(v)/2] ^= 0x10
		return b.Put(k, v)
	})
	if cerr := bdb.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
}

// attemptUnreadableFixture is an inspector over a store holding one
// delivery, its body small and whole, its only attempt (a 502) damaged.
func attemptUnreadableFixture(t *testing.T) (*fixture, *devhook.Delivery) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	d := newDelivery(time.Now().Add(-time.Minute).Truncate(time.Millisecond), 1, []byte(`{"small":1}`), true)
	put(t, db, d, 502)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	damageAttempt(t, path, d.ID, 1)
	return newFixture(t, fixtureOptions{path: path}), d
}

// A delivery one of whose attempts cannot be read, its body whole: its
// body downloads as it arrived (before, the download failed with the
// attempt's error, 500), and the attempt's answer is refused, saying why;
// it is replayed.
func TestDelivery_AttemptUnreadableBodyDownloads(t *testing.T) {
	f, d := attemptUnreadableFixture(t)

	res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/deliveries/" + d.ID + "/body")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || string(body) != string(d.Body) {
		t.Errorf("GET its body: %s %q (%v), want 200 and the body it arrived with", res.Status, body, err)
	}
	var e struct{ Error string }
	if code := f.get(t, "/api/deliveries/"+d.ID+"/attempts/1/body", &e); code == http.StatusOK || !strings.Contains(e.Error, "attempt 1 of delivery "+d.ID+" is damaged") {
		t.Errorf("GET its attempt's answer: %d %q, want it refused, saying the attempt is damaged", code, e.Error)
	}
	// Its curl command needs its request only, as the export's does.
	res, err = f.HTTP.Client().Get(f.HTTP.URL + "/api/deliveries/" + d.ID + "/curl")
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), "curl ") || !strings.Contains(string(body), `{"small":1}`) {
		t.Errorf("GET its curl command: %s %q (%v), want 200 and the command", res.Status, body, err)
	}
	// Replay too: the unreadable attempt is its history, not what is
	// sent (before, 409), as the agent's Replay and retries take it.
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}
	if _, err := c.Replay(context.Background(), d.ID, devhook.ReplayOptions{}); err != nil {
		t.Errorf("Replay: %v, want it sent", err)
	}
	if n := f.Replayer.callCount(); n != 1 {
		t.Errorf("the replay reached the replayer %d times, want once", n)
	}
}

// A delivery whose body cannot be read: its page's API answers everything
// else, its body's error (naming the file and what to do) in body_error,
// and the client gives it with a *devhook.PartialError. Replaying it, or
// its curl command, is refused (409) saying why, and nothing is sent.
func TestDelivery_BodyUnreadable(t *testing.T) {
	f, broken, whole := partialFixture(t)
	var v inspector.DeliveryView
	if code := f.get(t, "/api/deliveries/"+broken.ID, &v); code != http.StatusOK {
		t.Fatalf("GET the delivery: %d, want 200 with what can be read", code)
	}
	if v.Delivery == nil || v.Method != broken.Method || v.Header.Get("Content-Type") != "application/json" || v.Verdict != broken.Verdict ||
		len(v.Attempts) != 2 || v.Attempts[1].Status != 500 || v.Body != nil || len(v.View.Attempts) != 2 {
		t.Fatalf("GET the delivery: %+v, want all of it but its body and its first attempt", v.Delivery)
	}
	if a := v.Attempts[0]; a.Seq != 1 || a.Status != 0 || !strings.Contains(a.ReadError, "attempt 1 of delivery "+broken.ID+" is damaged") {
		t.Errorf("attempt 1: %+v, want it listed with its read_error", a)
	}
	if !strings.Contains(v.BodyError, "missing") || !strings.Contains(v.BodyError, ".bodies") {
		t.Errorf("body_error %q, want it to say the body file is missing and where", v.BodyError)
	}
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}
	d, err := c.Delivery(context.Background(), broken.ID)
	var partial *devhook.PartialError
	if d == nil || !errors.As(err, &partial) || d.BodyError != v.BodyError || d.Method != broken.Method {
		t.Errorf("Client.Delivery: %+v, %v; want the delivery with a *devhook.PartialError", d, err)
	}
	if d, err := c.Delivery(context.Background(), whole.ID); err != nil || string(d.Body) != string(whole.Body) {
		t.Errorf("Client.Delivery of the other: %v, want it whole", err)
	}

	_, err = c.Replay(context.Background(), broken.ID, devhook.ReplayOptions{})
	if devhook.ErrorCode(err) != devhook.ECONFLICT || !strings.Contains(err.Error(), "cannot replay") || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Replay: %v, want a conflict saying the body cannot be read", err)
	}
	if n := f.Replayer.callCount(); n != 0 || len(f.Receiver.requests()) != 0 {
		t.Errorf("the replay reached the replayer %d times, the receiver %d: nothing may be sent", n, len(f.Receiver.requests()))
	}
	if code := f.get(t, "/api/deliveries/"+broken.ID+"/curl", nil); code != http.StatusConflict {
		t.Errorf("GET its curl command: %d, want 409", code)
	}
	if code := f.get(t, "/api/deliveries/"+broken.ID+"/attempts/2/body", nil); code != http.StatusOK {
		t.Errorf("GET its second attempt's answer: %d, want 200 (the attempt reads)", code)
	}
	if code := f.get(t, "/api/deliveries/"+broken.ID+"/attempts/1/body", nil); code == http.StatusOK {
		t.Errorf("GET its first attempt's answer: %d, want its error", code)
	}
	// Its parts are its own: reading it does not make every list say that
	// records were skipped as damaged.
	if d := f.DB.Damage(); d.Any() {
		t.Errorf("Damage: %+v, want nothing: the delivery's record reads", d)
	}
}

// The page shows the delivery and says its body cannot be read.
func TestInBrowser_BodyUnreadable(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	f, broken, _ := partialFixture(t)
	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/d/"+broken.ID),
		inspectortest.WaitText("#delivery-id", broken.ID),
		inspectortest.WaitText("#body-error", "missing"),
		inspectortest.WaitText("#partial-note", "cannot be read"),
		inspectortest.WaitText("#attempts", "500"),
		inspectortest.WaitText(`#attempts details[data-seq="1"] .read-error`, "attempt 1 of delivery "+broken.ID+" is damaged"),
	)
	tab.Screenshot(t, "inspector-delivery-body-unreadable")
}

// partialRunFixture is partialFixture with the two deliveries in run
// run-partial, the first of which cannot be read.
func partialRunFixture(t *testing.T, o fixtureOptions) (f *fixture, broken, whole *devhook.Delivery) {
	t.Helper()
	at := time.Now().Add(-time.Minute)
	var big map[string]any
	if err := json.Unmarshal(runStatusBody(t, "run-partial", "queued", at), &big); err != nil {
		t.Fatal(err)
	}
	big["padding"] = strings.Repeat("x", 2000) // in a body file
	b, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	f, broken, whole = partialFixtureOf(t, b, runStatusBody(t, "run-partial", "running", at), o)
	if broken.Event.RunID != "run-partial" || whole.Event.RunID != "run-partial" {
		t.Fatalf("the fixture's deliveries are of runs %q and %q", broken.Event.RunID, whole.Event.RunID)
	}
	return f, broken, whole
}

// getError fetches path and returns its status, its JSON error and its
// Content-Disposition.
func (f *fixture) getError(t *testing.T, path string) (int, string, string) {
	t.Helper()
	res, err := f.HTTP.Client().Get(f.HTTP.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct{ Error string }
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("GET %s: %s, not a JSON error: %q", path, res.Status, b)
		}
	}
	return res.StatusCode, e.Error, res.Header.Get("Content-Disposition")
}

// Every endpoint that meets a part of a delivery that cannot be read
// answers 409, as replay does, saying what cannot be read, in which file,
// and what to do, never 500 (before, the body's download, an attempt's
// answer and a scenario holding the delivery answered 500), and logs
// nothing: it is the store's state, not the inspector's failure. Those
// that need no such part answer 200.
func TestDelivery_UnreadablePartsAre409(t *testing.T) {
	var (
		mu     sync.Mutex
		logged []string
	)
	f, broken, whole := partialRunFixture(t, fixtureOptions{config: func(c *inspector.Config) {
		c.Logf = func(format string, args ...any) {
			mu.Lock()
			logged = append(logged, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
	}})
	id := broken.ID
	bodySays := []string{"missing", filepath.Join(filepath.Base(f.DB.Path())+".bodies", ""), "copied too"}
	attemptSays := []string{"attempt 1 of delivery " + id + " is damaged", "devhook deliveries delete " + id, f.DB.Path()}
	for _, c := range []struct {
		path  string
		says  []string
		other string // a part the request does not need: not named
	}{
		{"/api/deliveries/" + id + "/body", append([]string{"cannot download the body of delivery " + id}, bodySays...), "an attempt cannot be read"},
		{"/api/deliveries/" + id[:20] + "/body", append([]string{"cannot download the body of delivery " + id}, bodySays...), "an attempt cannot be read"},
		{"/api/deliveries/" + id + "/attempts/1/body", append([]string{"cannot download the answer of attempt 1 of delivery " + id}, attemptSays...), "its body cannot be read"},
		{"/api/deliveries/" + id + "/curl", append([]string{"cannot write the curl command of delivery " + id}, bodySays...), "an attempt cannot be read"},
		{"/api/scenario?id=" + whole.ID + "&id=" + id, append([]string{"cannot save delivery " + id + " in a scenario", "nothing was saved"}, bodySays...), ""},
		{"/api/scenario?run_id=run-partial", append([]string{"cannot save delivery " + id + " in a scenario", "nothing was saved"}, bodySays...), ""},
	} {
		code, msg, disposition := f.getError(t, c.path)
		if code != http.StatusConflict || disposition != "" {
			t.Errorf("GET %s: %d (Content-Disposition %q) %q, want 409 and no file", c.path, code, disposition, msg)
			continue
		}
		for _, want := range c.says {
			if !strings.Contains(msg, want) {
				t.Errorf("GET %s: %q, want it to say %q", c.path, msg, want)
			}
		}
		if c.other != "" && strings.Contains(msg, c.other) {
			t.Errorf("GET %s: %q, want it to name only the part it needs", c.path, msg)
		}
		// Only a replay sends: the others write or save something.
		if strings.Contains(msg, "nothing was sent") {
			t.Errorf("GET %s: %q, which sends nothing in any case", c.path, msg)
		}
	}
	for _, path := range []string{
		"/api/deliveries", "/api/deliveries/" + id, "/api/deliveries/" + id + "/attempts/2/body", "/api/deliveries/" + id + "/request",
		"/api/deliveries/" + id[:20] + "/request", "/api/runs", "/api/runs/run-partial", "/api/scenario?id=" + whole.ID,
	} {
		if code, msg, _ := f.getError(t, path); code != http.StatusOK {
			t.Errorf("GET %s: %d %q, want 200: it needs no part that cannot be read", path, code, msg)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 0 {
		t.Errorf("the inspector logged %q, want nothing: no request failed on its side", logged)
	}
}

// The page says why it cannot save a selection or a run holding a
// delivery that cannot be read, and why it cannot write its curl command,
// with the API's words, and keeps them on the page; before, a save was a
// download the browser said failed, and the curl command "409 Conflict".
func TestInBrowser_UnreadableSaysWhy(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	f, broken, whole := partialRunFixture(t, fixtureOptions{})
	tab := b.NewTab(t)
	row := func(id string) string { return `#deliveries tr[data-id="` + id + `"]` }
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/"),
		inspectortest.WaitSelector(row(broken.ID)),
		inspectortest.WaitSelector(row(whole.ID)),
		inspectortest.Click(row(broken.ID)+" .pick-box"),
		inspectortest.Click(row(whole.ID)+" .pick-box"),
		inspectortest.WaitText("#selection-count", "2 deliveries selected"),
		inspectortest.Click("#save-selection"),
		inspectortest.WaitText("#list-notice #save-error", "Could not save as a scenario: cannot save delivery "+broken.ID+" in a scenario"),
		inspectortest.WaitText("#list-notice #save-error", ".bodies"),
	)
	tab.Screenshot(t, "inspector-list-save-unreadable")
	// The whole one alone saves, as before.
	tab.Run(t, inspectortest.Click(row(broken.ID)+" .pick-box"), inspectortest.WaitText("#selection-count", "1 delivery selected"))
	dl := tab.Download(t, inspectortest.Click("#save-selection"))
	if want := savedByCLI(t, storeHistory{f}, scenario.Selection{IDs: []string{whole.ID}}); !bytes.Equal(dl.Body, want) || dl.Name != "scenario-1-deliveries.json" {
		t.Errorf("the whole delivery's download %q from %s:\n%s\nwant scenario-1-deliveries.json:\n%s", dl.Name, dl.URL, dl.Body, want)
	}
	if hidden := inspectortest.Eval[bool](t, tab, `document.querySelector("#list-notice").hidden`); !hidden {
		t.Errorf("the refusal is still shown after a save that worked")
	}

	// A search lists the delivery whose body it could not read, saying so
	// on its row; the other one's body does not hold the text.
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/?q=padding"),
		inspectortest.WaitText(row(broken.ID)+" .body-unreadable", "body unreadable"),
	)
	if title := inspectortest.Eval[string](t, tab, `document.querySelector('`+row(broken.ID)+` .body-unreadable').title`); !strings.Contains(title, "missing") {
		t.Errorf("the chip's title %q, want the body's error", title)
	}
	if n := inspectortest.Eval[int](t, tab, `document.querySelectorAll("#deliveries tbody tr").length`); n != 1 {
		t.Errorf("the search lists %d rows, want the unreadable one alone", n)
	}

	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/runs/run-partial"),
		inspectortest.WaitCount("#run-deliveries tbody tr", 2),
		inspectortest.Click("#save-scenario"),
		inspectortest.WaitText("#run-notice #save-error", "Could not save this run as a scenario: cannot save delivery "+broken.ID),
		inspectortest.WaitText("#run-notice #save-error", "missing"),
	)

	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/d/"+broken.ID),
		inspectortest.WaitText("#body-error", "missing"),
		inspectortest.Click("#copy-curl"),
		inspectortest.WaitText("#replay-error", "Could not build the curl command: cannot write the curl command of delivery "+broken.ID),
		inspectortest.WaitText("#replay-error", ".bodies"),
		inspectortest.Click("#replay"),
		inspectortest.WaitText("#replay-error", "Replay failed: cannot replay delivery "+broken.ID),
	)
	tab.Screenshot(t, "inspector-delivery-refused-unreadable")
}

// A delivery only an attempt of which cannot be read: its page says its
// request is whole and replays it (before, the note said devhook would
// not, and the replay was refused).
func TestInBrowser_AttemptUnreadableReplays(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	f, d := attemptUnreadableFixture(t)
	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/d/"+d.ID),
		inspectortest.WaitText("#partial-note", "Some attempts of this delivery cannot be read"),
		inspectortest.WaitText("#partial-note", "it can be replayed"),
		inspectortest.Click("#replay"),
		inspectortest.WaitText(`#attempts .attempt[data-seq="2"]`, "replay"),
	)
	if got := f.Receiver.requests(); len(got) != 1 || string(got[0].Body) != `{"small":1}` {
		t.Errorf("the receiver got %d requests (%+v), want the delivery once", len(got), got)
	}
}

// A replay of a delivery whose body cannot be read, with a body that
// replaces it whole (body_text, body_base64), needs nothing unreadable:
// it is sent with that body, re-signed, and recorded as edited. Before,
// the handler refused it (409) as a plain replay. One that edits only its
// headers still is refused, nothing sent.
func TestReplay_BodyUnreadableReplaced(t *testing.T) {
	f, broken, _ := partialFixture(t)
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}
	ctx := context.Background()
	_, err := c.Replay(ctx, broken.ID, devhook.ReplayOptions{SetHeader: http.Header{"X-Edit": {"1"}}})
	if devhook.ErrorCode(err) != devhook.ECONFLICT || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Replay with a header edit: %v, want a conflict saying the body cannot be read", err)
	}
	if n := len(f.Receiver.requests()); n != 0 {
		t.Fatalf("the receiver got %d requests, want none", n)
	}
	a, err := c.Replay(ctx, broken.ID, devhook.ReplayOptions{Body: []byte(`{"fixed":1}`), HasBody: true, SetHeader: http.Header{"X-Edit": {"1"}}})
	if err != nil || a.Status != http.StatusOK || !a.Edited() || !a.Resigned() {
		t.Fatalf("Replay with a body: %+v, %v; want it sent, edited and re-signed", a, err)
	}
	got := f.Receiver.requests()
	if len(got) != 1 || string(got[0].Body) != `{"fixed":1}` || got[0].Header.Get("X-Edit") != "1" {
		t.Errorf("the receiver got %+v, want the body given, its header edited", got)
	}
	var v inspector.DeliveryView
	if code := f.get(t, "/api/deliveries/"+broken.ID, &v); code != http.StatusOK || len(v.Attempts) != 3 || !v.Attempts[2].Edited() || v.BodyError == "" {
		t.Errorf("GET the delivery: %d, %+v; want its third attempt, edited, its body still unreadable", code, v.Delivery)
	}
}

// DELETE with a filter cannot match a damaged list row: it keeps it, and
// its answer names it in kept_damaged (before, it kept it without a word),
// which the client hands to devhook deliveries delete.
func TestDeleteMatching_SaysWhatItKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	a, b := newDelivery(at, 1, []byte(`{"n":1}`), true), newDelivery(at.Add(time.Second), 2, []byte(`{"n":2}`), true)
	put(t, db, a, 500)
	put(t, db, b, 500)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		s := tx.Bucket([]byte("summaries"))
		v := append([]byte{}, s.Get([]byte(a.ID))...)
		v[len(v)/2] ^= 0x10
		return s.Put([]byte(a.ID), v)
	})
	if cerr := bdb.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	f := newFixture(t, fixtureOptions{path: path})
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}
	res, err := c.DeleteMatching(context.Background(), storage.Selection{Filter: devhook.Filter{Status: 500}})
	if err != nil || res.Deleted != 1 || len(res.IDs) != 1 || res.IDs[0] != b.ID || len(res.KeptDamaged) != 1 || res.KeptDamaged[0] != a.ID {
		t.Errorf("DeleteMatching status 500: %+v, %v; want %s deleted, %s kept", res, err, b.ID, a.ID)
	}
}

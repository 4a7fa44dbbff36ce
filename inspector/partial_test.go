package inspector_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/inspector/inspectortest"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// partialFixture is an inspector over a store holding a delivery whose
// body file is gone (removed by hand, or a store copied without its
// directory of body files), its first attempt damaged (a bit flipped)
// and its second whole, and another delivery whole.
func partialFixture(t *testing.T) (f *fixture, broken, whole *devhook.Delivery) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	broken = newDelivery(at, 1, []byte(`{"big":"`+strings.Repeat("x", 2000)+`"}`), true)
	whole = newDelivery(at.Add(time.Second), 2, []byte(`{"small":1}`), true)
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
	return newFixture(t, fixtureOptions{path: path}), broken, whole
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

// A delivery one of whose attempts cannot be read, its body whole: its
// body downloads as it arrived (before, the download failed with the
// attempt's error, 500), and the attempt's answer is refused, saying why.
func TestDelivery_AttemptUnreadableBodyDownloads(t *testing.T) {
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
	f := newFixture(t, fixtureOptions{path: path})

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
	if d := f.DB.Damage(); d.Damaged != 2 {
		t.Errorf("Damage: %+v, want the body and the attempt noted", d)
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

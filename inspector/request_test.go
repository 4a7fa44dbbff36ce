package inspector_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
)

// A header value that is not UTF-8 (a Latin-1 one) cannot be a JSON
// string: the client reads the delivery's request byte for byte all the
// same, so that export and scenario save through a running listen write
// what they write from its store. A listen from before the endpoint
// answers 404: the client keeps what the JSON said.
func TestClient_DeliveryKeepsBytesJSONCannot(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	d := newDelivery(time.Now(), 1, []byte(`{}`), true)
	d.Header["X-Latin1"] = []string{"caf\xe9", "ok", "\xff\xfe\x80"}
	d.Header["X-Utf8"] = []string{"café \uFFFD"}
	d.RawQuery = "q=caf\xe9"
	put(t, f.DB, d, 200)
	if _, err := f.DB.AddAttempt(d.ID, devhook.Attempt{Kind: devhook.AttemptReplay, Target: "http://127.0.0.1:9/x?q=caf\xe9", Status: 200}); err != nil {
		t.Fatal(err)
	}
	stored, err := f.DB.Delivery(d.ID)
	if err != nil {
		t.Fatal(err)
	}

	client := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}
	got, err := client.Delivery(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"X-Latin1", "X-Utf8", "Content-Type"} {
		if !slices.Equal(got.Header[k], d.Header[k]) {
			t.Errorf("%s = %q, stored %q", k, got.Header[k], d.Header[k])
		}
	}
	var targets, want []string
	for i := range got.Attempts {
		targets = append(targets, got.Attempts[i].Target)
	}
	for i := range stored.Attempts {
		want = append(want, stored.Attempts[i].Target)
	}
	if !slices.Equal(targets, want) || len(want) != 2 {
		t.Errorf("attempt targets %q, stored %q", targets, want)
	}
	if got.RawQuery != d.RawQuery || got.Path != d.Path || got.Method != d.Method || len(got.Header) != len(d.Header) {
		t.Errorf("request %s %s ? %q with %d headers, stored %s %s ? %q with %d", got.Method, got.Path, got.RawQuery, len(got.Header),
			d.Method, d.Path, d.RawQuery, len(d.Header))
	}

	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/request") {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		f.HTTP.Config.Handler.ServeHTTP(w, r)
	}))
	defer old.Close()
	oc := &inspector.Client{BaseURL: old.URL, HTTP: old.Client()}
	got, err = oc.Delivery(context.Background(), d.ID)
	if err != nil || got.Header.Get("X-Latin1") != "caf\uFFFD" {
		t.Errorf("from a listen without the endpoint: %v %q", err, got.Header.Get("X-Latin1"))
	}
}

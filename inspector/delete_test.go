package inspector_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/storage"
)

// do sends a request to the fixture's inspector with header and returns
// the status and the body.
func (f *fixture) do(t *testing.T, method, path string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.HTTP.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := f.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The delete endpoints: by id or prefix, several ids all or none, a
// selection, all; each deletion heard by Config.Deleted and said on the
// live stream; refused from another origin like replay.
func TestDelete(t *testing.T) {
	var mu sync.Mutex
	var heard [][]string
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) {
		c.Deleted = func(ids []string) { mu.Lock(); heard = append(heard, ids); mu.Unlock() }
	}})
	items := seedList(t, f, 12) // oldest first; every fifth got no answer
	ids := make([]string, len(items))
	for i, s := range items {
		ids[i] = s.ID
	}
	events := openEvents(t, f.HTTP.URL)
	nextDeleted := func() devhook.Change {
		t.Helper()
		for {
			ev, data := events.next(t)
			if ev != "deleted" {
				continue
			}
			var c devhook.Change
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}

	// Refused from another origin: nothing deleted.
	if st, body := f.do(t, http.MethodDelete, "/api/deliveries/"+ids[3], map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}); st != http.StatusForbidden {
		t.Fatalf("a cross-site DELETE: %d %s", st, body)
	}
	if st, body := f.do(t, http.MethodDelete, "/api/deliveries", map[string]string{"Origin": "https://evil.example"}); st != http.StatusForbidden {
		t.Fatalf("a DELETE of all with a foreign Origin: %d %s", st, body)
	}
	if n, _ := f.DB.Count(); n != 12 {
		t.Fatalf("%d deliveries after refused deletes, want 12", n)
	}

	// One by a prefix only it has, without dashes.
	prefix := strings.ReplaceAll(ids[3], "-", "")[:30]
	st, body := f.do(t, http.MethodDelete, "/api/deliveries/"+prefix, nil)
	var res inspector.DeleteResult
	if err := json.Unmarshal([]byte(body), &res); st != http.StatusOK || err != nil || res.Deleted != 1 || !slices.Equal(res.IDs, ids[3:4]) {
		t.Fatalf("DELETE by prefix: %d %s", st, body)
	}
	if c := nextDeleted(); !slices.Equal(c.Deleted, ids[3:4]) || c.Reload {
		t.Errorf("the deleted event: %+v", c)
	}
	if st := f.get(t, "/api/deliveries/"+ids[3], nil); st != http.StatusNotFound {
		t.Errorf("GET of a deleted delivery: %d", st)
	}

	// Ambiguous and missing: 409 and 404, nothing deleted.
	common := ids[0][:2] // UUIDv7s of one day share their first digits
	if st, body := f.do(t, http.MethodDelete, "/api/deliveries/"+common, nil); st != http.StatusConflict || !strings.Contains(body, "give more of the id") {
		t.Errorf("DELETE of an ambiguous prefix: %d %s", st, body)
	}
	if st, body := f.do(t, http.MethodDelete, "/api/deliveries?id="+ids[4]+"&id=ffff", nil); st != http.StatusNotFound || !strings.Contains(body, `no delivery with id or prefix \"ffff\"`) || !strings.Contains(body, "nothing was deleted") {
		t.Errorf("DELETE of one found and one missing: %d %s", st, body)
	}
	if n, _ := f.DB.Count(); n != 11 {
		t.Fatalf("%d deliveries after refused deletes, want 11", n)
	}

	// Several by id, through the client the commands use.
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: &http.Client{Timeout: 30 * time.Second}}
	ctx := context.Background()
	if res, err := c.Delete(ctx, []string{ids[4], ids[6][:28]}); err != nil || res.Deleted != 2 {
		t.Fatalf("Client.Delete: %+v, %v", res, err)
	}
	if c := nextDeleted(); !slices.Equal(c.Deleted, []string{ids[4], ids[6]}) {
		t.Errorf("the deleted event: %+v", c)
	}
	if _, err := c.Delivery(ctx, common); devhook.ErrorCode(err) != devhook.ECONFLICT {
		t.Errorf("Client.Delivery of an ambiguous prefix: %v", err)
	}
	if d, err := c.Delivery(ctx, ids[7][:30]); err != nil || d.ID != ids[7] {
		t.Errorf("Client.Delivery by prefix: %v", err)
	}

	// A selection: no answer (every fifth: 0, 5, 10).
	res, err := c.DeleteMatching(ctx, storage.Selection{Filter: devhook.Filter{Status: -1}})
	if err != nil || !slices.Equal(res.IDs, []string{ids[0], ids[5], ids[10]}) {
		t.Fatalf("DeleteMatching status none: %+v, %v", res, err)
	}
	nextDeleted()
	if st, body := f.do(t, http.MethodDelete, "/api/deliveries?received_before=yesterday", nil); st != http.StatusBadRequest {
		t.Errorf("a bad received_before: %d %s", st, body)
	}

	// All.
	res, err = c.DeleteMatching(ctx, storage.Selection{})
	if err != nil || res.Deleted != 6 {
		t.Fatalf("DeleteMatching all: %+v, %v", res, err)
	}
	nextDeleted()
	var page inspector.ListPage
	f.get(t, "/api/deliveries", &page)
	if len(page.Items) != 0 {
		t.Errorf("%d deliveries listed after deleting all", len(page.Items))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 4 || !slices.Equal(heard[0], ids[3:4]) {
		t.Errorf("Config.Deleted heard %v", heard)
	}
}

// GET, replay and the other endpoints that take an id take a unique
// prefix too.
func TestIDPrefixes(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	items := seedList(t, f, 3)
	id := items[1].ID
	prefix := id[:30]
	var d devhook.Delivery
	if st := f.get(t, "/api/deliveries/"+prefix, &d); st != http.StatusOK || d.ID != id {
		t.Fatalf("GET by prefix: %d %s", st, d.ID)
	}
	if st := f.get(t, "/api/deliveries/"+prefix+"/body", nil); st != http.StatusOK {
		t.Errorf("GET body by prefix: %d", st)
	}
	if st, body := f.do(t, http.MethodGet, "/api/scenario?id="+prefix, nil); st != http.StatusOK || !strings.Contains(body, `"deliveries"`) {
		t.Errorf("a scenario by prefix: %d %s", st, body)
	}
	if st, body := f.do(t, http.MethodPost, "/api/deliveries/"+prefix+"/replay", nil); st != http.StatusOK || f.Replayer.lastCall().ID != id {
		t.Errorf("replay by prefix: %d %s", st, body)
	}
	if st, body := f.do(t, http.MethodGet, "/api/deliveries/"+id[:2], nil); st != http.StatusConflict || !strings.Contains(body, items[0].ID) {
		t.Errorf("GET of an ambiguous prefix: %d %s", st, body)
	}
}

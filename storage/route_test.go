package storage_test

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// The route that chose an attempt's target (listen --route) is kept with
// the attempt, as an optional field: through the journal and bbolt and
// across a restart; a record without it reads as before, and a devhook
// from before routes reads the rest of a new record unchanged (it ends at
// the fields it knows).
func TestAttemptRoute(t *testing.T) {
	a := newAttempt(1)
	a.Seq = 1
	a.Made = devhook.MadeAsArrived
	a.Route = &devhook.Route{Index: 2, Text: "path:/github/** -> localhost:9001", Target: "http://localhost:9001"}
	enc := storage.EncodeAttempt(&a)
	got, err := storage.DecodeAttempt(enc)
	if err != nil {
		t.Fatal(err)
	}
	sameAttempt(t, got, a)

	old := a
	old.Route = nil
	oldEnc := storage.EncodeAttempt(&old)
	if !bytes.HasPrefix(unsealed(enc), unsealed(oldEnc)) || len(enc) == len(oldEnc) {
		t.Fatalf("a record with a route does not extend the one without")
	}
	if got, err = storage.DecodeAttempt(oldEnc); err != nil || got.Route != nil {
		t.Fatalf("an attempt recorded without a route: %+v %v", got.Route, err)
	}

	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{})
	d := newDelivery(1)
	mustPut(t, db, d)
	routes := []*devhook.Route{
		{Index: 1, Text: "json:data.status_v2=succeeded -> :9002", Target: "http://localhost:9002"},
		{Index: 0, Text: devhook.RouteDefault},
		{Index: 3, Text: "header:X-Env=test -> drop", Target: devhook.RouteDrop},
		nil,
	}
	for _, rt := range routes {
		at := newAttempt(1)
		at.Route = rt
		if rt.Drop() {
			at.Kind, at.Target, at.Status = devhook.AttemptDrop, devhook.RouteDrop, 0
		}
		if _, err := db.AddAttempt(d.ID, at); err != nil {
			t.Fatal(err)
		}
	}
	st := devhook.RetryState{State: devhook.RetryOwed, Since: time.Unix(1700000000, 0).UTC(), Route: routes[0]}
	if err := db.PutRetry(d.ID, st); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got, err := db.Delivery(d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Attempts) != len(routes) {
			t.Fatalf("%s: %d attempts", when, len(got.Attempts))
		}
		for i, rt := range routes {
			if !reflect.DeepEqual(got.Attempts[i].Route, rt) {
				t.Errorf("%s: attempt %d route %+v, want %+v", when, i+1, got.Attempts[i].Route, rt)
			}
		}
		if r := got.ArrivalRoute(); !reflect.DeepEqual(r, routes[0]) {
			t.Errorf("%s: ArrivalRoute = %+v, want %+v", when, r, routes[0])
		}
		rs, err := db.Retries([]string{d.ID})
		if err != nil || !reflect.DeepEqual(rs[d.ID].Route, routes[0]) {
			t.Errorf("%s: retry state %+v %v, want its route %+v", when, rs[d.ID], err, routes[0])
		}
	}
	check("recorded")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, storage.Config{})
	check("after a restart")
}

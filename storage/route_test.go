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

// Routes reads the route that took each delivery from its attempts, for
// the list: the first attempt that is not a replay and has one, whether
// the journal or bbolt holds it; none for a delivery without.
func TestRoutes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{})
	r1 := &devhook.Route{Index: 1, Text: "path:/a/** -> :1", Target: "http://localhost:1"}
	r2 := &devhook.Route{Index: 2, Text: "header:X=y -> drop", Target: devhook.RouteDrop}
	def := &devhook.Route{Index: 0, Text: devhook.RouteDefault}
	ds := []*devhook.Delivery{newDelivery(1), newDelivery(2), newDelivery(3), newDelivery(4)}
	mustPut(t, db, ds...)
	add := func(d *devhook.Delivery, kind string, rt *devhook.Route) {
		t.Helper()
		at := newAttempt(1)
		at.Kind, at.Route = kind, rt
		if _, err := db.AddAttempt(d.ID, at); err != nil {
			t.Fatal(err)
		}
	}
	add(ds[0], devhook.AttemptForward, r1)
	add(ds[0], devhook.AttemptRetry, r2) // a later attempt's route is not the one that took it
	add(ds[1], devhook.AttemptReplay, r1)
	add(ds[1], devhook.AttemptDrop, r2) // a replay first (owed behind another, say), then the drop
	add(ds[2], devhook.AttemptForward, def)
	add(ds[3], devhook.AttemptForward, nil)
	want := map[string]devhook.Route{ds[0].ID: *r1, ds[1].ID: *r2, ds[2].ID: *def}
	ids := []string{ds[0].ID, ds[1].ID, ds[2].ID, ds[3].ID, "unknown", ""}
	check := func(when string) {
		t.Helper()
		got, err := db.Routes(ids)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Routes = %+v, %v; want %+v", when, got, err, want)
		}
	}
	check("in the journal or bbolt")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, storage.Config{})
	check("after a restart")
	add(ds[3], devhook.AttemptRedelivery, r1) // a second forward, say after an attempt of an older devhook
	want[ds[3].ID] = *r1
	check("with one attempt more, pending")
}

// BenchmarkRoutes is what the list's routes cost: a page of 50 deliveries,
// each with a routed forward, beside the list itself (List) and the retry
// states the list reads too (Retries).
func BenchmarkRoutes(b *testing.B) {
	db := MustOpenDB(b, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	rt := &devhook.Route{Index: 2, Text: "path:/hook/** -> localhost:9001", Target: "http://localhost:9001"}
	var ids []string
	for i := range 50 {
		d := newDelivery(i + 1)
		mustPut(b, db, d)
		at := newAttempt(1)
		at.Route = rt
		if _, err := db.AddAttempt(d.ID, at); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.Run("Routes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rs, err := db.Routes(ids); err != nil || len(rs) != 50 {
				b.Fatal(len(rs), err)
			}
		}
	})
	b.Run("Retries", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := db.Retries(ids); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s, err := db.List(devhook.Filter{Limit: 50}); err != nil || len(s) != 50 {
				b.Fatal(len(s), err)
			}
		}
	})
}

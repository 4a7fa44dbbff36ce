package storage_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// listFixture records 12 deliveries with known properties:
//
//	i   verdict            last status  run    status_v2  body
//	0   ok                 (none)       run-a  queued     {"..."}
//	1   ok                 200          run-a  running
//	2   invalid_signature  500          run-b  queued
//	3   ok                 0 (error)    run-a  succeeded
//	4   missing_signature  200          -      -          "Hello WORLD"
//	5..11 ok               204          run-ab queued     (run id with run-a as a prefix)
func listFixture(t *testing.T) *storage.DB {
	t.Helper()
	db := MustOpenDB(t, storage.Config{})
	type row struct {
		verdict, run, statusV2 string
		statuses               []int
		body                   string
	}
	rows := []row{
		{devhook.VerdictOK, "run-a", "queued", nil, ""},
		{devhook.VerdictOK, "run-a", "running", []int{500, 200}, ""},
		{devhook.VerdictInvalidSignature, "run-b", "queued", []int{500}, ""},
		{devhook.VerdictOK, "run-a", "succeeded", []int{200, 0}, ""},
		{devhook.VerdictMissingSignature, "", "", []int{200}, "say: Hello WORLD, ünïcode ÄÖ"},
	}
	for range 7 {
		rows = append(rows, row{devhook.VerdictOK, "run-ab", "queued", []int{204}, ""})
	}
	for i, r := range rows {
		d := newDelivery(i)
		d.Verdict.Result = r.verdict
		if r.run != "" {
			d.Body = fmt.Appendf(nil, `{"event_type":"run.status","data":{"run_id":%q,"status_v2":%q}}`, r.run, r.statusV2)
		} else {
			d.Body = []byte(r.body)
		}
		d.Event = devhook.ParseEvent(d.Body)
		mustPut(t, db, d)
		for _, st := range r.statuses {
			a := newAttempt(i)
			a.Status = st
			if st == 0 {
				a.Error = "connection refused"
			}
			if _, err := db.AddAttempt(d.ID, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	return db
}

func ids(is ...int) []string {
	out := make([]string, len(is))
	for k, i := range is {
		out[k] = id(i)
	}
	return out
}

func summaryIDs(ss []devhook.Summary) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func TestList_Filters(t *testing.T) {
	db := listFixture(t)
	for _, c := range []struct {
		name string
		f    devhook.Filter
		want []string
	}{
		{"all, newest first", devhook.Filter{}, ids(11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)},
		{"limit", devhook.Filter{Limit: 3}, ids(11, 10, 9)},
		{"before", devhook.Filter{Before: id(5)}, ids(4, 3, 2, 1, 0)},
		{"before, limit", devhook.Filter{Before: id(5), Limit: 2}, ids(4, 3)},
		{"before an id not stored", devhook.Filter{Before: id(4) + "x"}, ids(4, 3, 2, 1, 0)},
		{"before the oldest", devhook.Filter{Before: id(0)}, ids()},
		{"before everything newer", devhook.Filter{Before: "z", Limit: 2}, ids(11, 10)},
		{"verdict", devhook.Filter{Verdict: devhook.VerdictInvalidSignature}, ids(2)},
		{"verdict ok", devhook.Filter{Verdict: devhook.VerdictOK, Before: id(5)}, ids(3, 1, 0)},
		{"verdict none", devhook.Filter{Verdict: devhook.VerdictNoSecret}, ids()},
		{"status", devhook.Filter{Status: 200}, ids(4, 1)},
		{"status 500 is not the last", devhook.Filter{Status: 500}, ids(2)},
		{"status -1: no answer or no attempt", devhook.Filter{Status: -1}, ids(3, 0)},
		{"run", devhook.Filter{RunID: "run-a"}, ids(3, 1, 0)},
		{"run, before", devhook.Filter{RunID: "run-a", Before: id(3)}, ids(1, 0)},
		{"run, before a newer id", devhook.Filter{RunID: "run-a", Before: id(11)}, ids(3, 1, 0)},
		{"run, limit", devhook.Filter{RunID: "run-ab", Limit: 2}, ids(11, 10)},
		{"run, before, limit", devhook.Filter{RunID: "run-ab", Before: id(8), Limit: 2}, ids(7, 6)},
		{"run unknown", devhook.Filter{RunID: "run"}, ids()},
		{"run and status", devhook.Filter{RunID: "run-a", Status: 200}, ids(1)},
		{"status_v2", devhook.Filter{StatusV2: "queued", Before: id(6)}, ids(5, 2, 0)},
		{"status_v2 and verdict", devhook.Filter{StatusV2: "queued", Verdict: devhook.VerdictOK, Limit: 100}, ids(11, 10, 9, 8, 7, 6, 5, 0)},
		{"text, any case", devhook.Filter{Text: "hello world"}, ids(4)},
		{"text, upper case", devhook.Filter{Text: "HELLO"}, ids(4)},
		{"text, non-ASCII", devhook.Filter{Text: "Äö"}, ids(4)},
		{"text in json", devhook.Filter{Text: `"RUN-B"`}, ids(2)},
		{"text, whole body", devhook.Filter{Text: "say: Hello WORLD, ünïcode ÄÖ"}, ids(4)},
		{"text longer than bodies", devhook.Filter{Text: "say: Hello WORLD, ünïcode ÄÖ!"}, ids()},
		{"text and verdict", devhook.Filter{Text: "run-a", Verdict: devhook.VerdictOK, Limit: 4}, ids(11, 10, 9, 8)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := db.List(c.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := summaryIDs(got); !slices.Equal(g, c.want) {
				t.Errorf("List(%+v) =\n%v\nwant\n%v", c.f, g, c.want)
			}
		})
	}
}

func TestList_Summary(t *testing.T) {
	db := listFixture(t)
	got, err := db.List(devhook.Filter{Before: id(4), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := got[0]
	if s.ID != id(3) || s.Attempts != 2 || s.Status != 0 || s.Error != "connection refused" ||
		s.Verdict != devhook.VerdictOK || s.Event.RunID != "run-a" || s.Event.StatusV2 != "succeeded" ||
		s.Method != "POST" || s.Path != "/hook" || s.BodySize == 0 || !s.ReceivedAt.Equal(t0.Add(3*time.Second)) {
		t.Errorf("summary = %+v", s)
	}
}

func TestList_LimitsAndPaging(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	const n = 1100
	ds := make([]*devhook.Delivery, n)
	for i := range ds {
		ds[i] = newDelivery(i)
	}
	if err := db.PutDeliveriesTx(ds); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		limit, want int
	}{{0, 50}, {-5, 50}, {1, 1}, {999, 999}, {1000, 1000}, {1001, 1000}, {1 << 30, 1000}} {
		got, err := db.List(devhook.Filter{Limit: c.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.want {
			t.Errorf("List(Limit: %d) returned %d, want %d", c.limit, len(got), c.want)
		}
	}

	// Paging with Before visits every delivery once, newest first.
	var seen []string
	before := ""
	for pages := 0; ; pages++ {
		if pages > n/50+1 {
			t.Fatal("paging does not end")
		}
		got, err := db.List(devhook.Filter{Before: before, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		seen = append(seen, summaryIDs(got)...)
		before = got[len(got)-1].ID
	}
	want := make([]string, n)
	for i := range want {
		want[i] = id(n - 1 - i)
	}
	if !slices.Equal(seen, want) {
		t.Errorf("paging saw %d ids, want %d in newest-first order", len(seen), n)
	}
}

func TestRunDeliveries(t *testing.T) {
	db := listFixture(t)
	// A late delivery of run-a recorded after the others, but with an
	// older id (it waited in the relay's queue): the order is by id.
	late := newDelivery(0)
	late.ID = id(0) + "-late"
	late.Body = []byte(`{"event_type":"run.status","data":{"run_id":"run-a","status_v2":"running"}}`)
	late.Event = devhook.ParseEvent(late.Body)
	mustPut(t, db, late)

	for _, c := range []struct {
		run  string
		want []string
	}{
		{"run-a", append(ids(0), id(0)+"-late", id(1), id(3))},
		{"run-b", ids(2)},
		{"run-ab", ids(5, 6, 7, 8, 9, 10, 11)},
		{"run", nil},
	} {
		got, err := db.RunDeliveries(c.run)
		if err != nil {
			t.Fatal(err)
		}
		if g := summaryIDs(got); !slices.Equal(g, c.want) {
			t.Errorf("RunDeliveries(%q) = %v, want %v", c.run, g, c.want)
		}
	}
	got, _ := db.RunDeliveries("run-b")
	if got[0].Status != 500 || got[0].Attempts != 1 {
		t.Errorf("RunDeliveries summary = %+v, want the last attempt's status", got[0])
	}
	if _, err := db.RunDeliveries(""); devhook.ErrorCode(err) != devhook.EINVALID {
		t.Errorf(`RunDeliveries("") error = %v, want %s`, err, devhook.EINVALID)
	}
}

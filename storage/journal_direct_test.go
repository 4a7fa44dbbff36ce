package storage_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// The journal replaces a bbolt commit per PutDelivery and AddAttempt
// (PutDeliveryDirect and AddAttemptDirect, export_test.go). The same calls
// through either must answer the same, and leave deliveries that List,
// RunDeliveries, Delivery and Count show the same: while the journal's
// records are pending, after a flush, and after the files are reopened.

// directCase is one of the deliveries TestJournal_MatchesDirectCommits
// records: ordinary ones, and the edges of what a sender may post.
func directCase(i int, rng *rand.Rand) *devhook.Delivery {
	d := newDelivery(i)
	switch rng.IntN(12) {
	case 0: // a run id too long to be a key: in the summary, not indexed
		d.Event.RunID = strings.Repeat("r", 1025)
	case 1: // a run id with a NUL byte: the same
		d.Event.RunID = "run-\x00-1"
	case 2:
		d.Body, d.Header = nil, nil
	case 3:
		d.Queued, d.RawQuery = true, "a=1&b=two"
		d.Verdict = devhook.Verdict{Result: devhook.VerdictInvalidSignature, Status: 401, Text: "signature mismatch"}
	case 4:
		d.Body = fmt.Appendf(nil, `{"event_type":"run.status","data":{"run_id":"run-%d","notes":"%s NEEDLE"}}`, i%7, strings.Repeat("x", 5000))
		d.Event = devhook.ParseEvent(d.Body)
	}
	return d
}

// directAttempt is an attempt of the kinds the agent records.
func directAttempt(rng *rand.Rand) devhook.Attempt {
	a := devhook.Attempt{Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/hook",
		StartedAt: t0.Add(time.Duration(rng.IntN(1e6)) * time.Millisecond),
		Duration:  devhook.Duration(rng.IntN(1e6)) * devhook.Duration(time.Microsecond)}
	switch rng.IntN(4) {
	case 0:
		a.Error = "connection refused"
	case 1:
		a.Kind = devhook.AttemptReplay
		a.Status = 500
		a.Request = &devhook.Request{Method: http.MethodPost, Path: "/hook", RawQuery: "x=1",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"edited":true}`), Resigned: true}
	default:
		a.Status = 200
		a.Header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		a.Body = []byte("ok")
	}
	return a
}

func TestJournal_MatchesDirectCommits(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			dir := t.TempDir()
			cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1}
			jpath, dpath := filepath.Join(dir, "journaled.db"), filepath.Join(dir, "direct.db")
			journaled, direct := MustOpenPath(t, jpath, cfg), MustOpenPath(t, dpath, cfg)
			rng := rand.New(rand.NewPCG(seed, 42))

			// New deliveries take even numbers, in order; late ones (their
			// id sorts before recorded ones) take the odd numbers skipped.
			var recorded []int
			next, late := 0, 1
			// The last ops run with flushes held: their records are all
			// pending when the stores are compared.
			held := false
			release := func() {}
			defer func() { release() }()
			for op := range 1500 {
				if op == 1200 {
					release, held = journaled.HoldFlushes(), true
				}
				put, redelivery := -1, false // the delivery to put, if any
				switch r := rng.IntN(100); {
				case r < 40 || len(recorded) == 0:
					put = next
					next += 2
				case r < 48 && late < next:
					put = late
					late += 2
				case r < 55: // a redelivery, whose fields may differ: the first stays
					put, redelivery = recorded[rng.IntN(len(recorded))], true
				case r < 97:
					id := id(recorded[rng.IntN(len(recorded))])
					if r == 96 {
						id = "0195b1c8-ffff-7000-8000-000000000000" // never recorded
					}
					a := directAttempt(rng)
					jgot, jerr := journaled.AddAttempt(id, a)
					dgot, derr := direct.AddAttemptDirect(id, a)
					if !sameErr(jerr, derr) || !reflect.DeepEqual(jgot, dgot) {
						t.Fatalf("op %d: AddAttempt(%s): journal %+v, %v; direct %+v, %v", op, id, jgot, jerr, dgot, derr)
					}
				case !held:
					if err := journaled.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				if put >= 0 {
					d := directCase(put, rng)
					if redelivery {
						d.Verdict.Text = "redelivered"
					}
					jcreated, jerr := journaled.PutDelivery(d)
					dcreated, derr := direct.PutDeliveryDirect(d)
					if !sameErr(jerr, derr) || jcreated != dcreated {
						t.Fatalf("op %d: PutDelivery(%s): journal %v, %v; direct %v, %v", op, d.ID, jcreated, jerr, dcreated, derr)
					}
					if jcreated {
						recorded = append(recorded, put)
					}
				}
				if op%250 == 249 {
					sameStores(t, fmt.Sprint("op ", op), journaled, direct, next)
				}
			}
			if journaled.Pending() == 0 {
				t.Fatal("nothing pending: the journal's reads of pending records went untested")
			}
			sameStores(t, "pending", journaled, direct, next)
			release()
			release = func() {}
			if err := journaled.Flush(); err != nil {
				t.Fatal(err)
			}
			sameStores(t, "flushed", journaled, direct, next)
			for _, db := range []*storage.DB{journaled, direct} {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			sameStores(t, "reopened", MustOpenPath(t, jpath, cfg), MustOpenPath(t, dpath, cfg), next)
		})
	}
}

// sameErr reports whether a and b are both nil, or both errors of one
// code.
func sameErr(a, b error) bool {
	return (a == nil) == (b == nil) && devhook.ErrorCode(a) == devhook.ErrorCode(b)
}

// sameStores fails the test unless every read of journaled and direct
// answers the same, for the deliveries numbered below n and one never
// recorded.
func sameStores(t *testing.T, when string, journaled, direct *storage.DB, n int) {
	t.Helper()
	same := func(what string, j, d any, jerr, derr error) {
		t.Helper()
		if jerr != nil || derr != nil || !reflect.DeepEqual(j, d) {
			t.Fatalf("%s: %s: journal %+v, %v\ndirect %+v, %v", when, what, j, jerr, d, derr)
		}
	}
	for _, f := range []devhook.Filter{
		{Limit: storage.MaxListLimit},
		{Limit: 7, Before: id(n / 2)},
		{Limit: 100, Verdict: devhook.VerdictInvalidSignature},
		{Limit: 100, Status: 200},
		{Limit: 100, Status: 500},
		{Limit: 100, Status: -1},
		{Limit: 100, RunID: "run-3"},
		{Limit: 100, StatusV2: "queued"},
		{Limit: 100, Text: "needle"},
	} {
		j, jerr := journaled.List(f)
		d, derr := direct.List(f)
		if len(d) == 0 && f.Before == "" {
			t.Fatalf("%s: List(%+v) is empty: the comparison tests nothing", when, f)
		}
		same(fmt.Sprintf("List(%+v)", f), j, d, jerr, derr)
	}
	for run := range 7 {
		j, jerr := journaled.RunDeliveries(fmt.Sprint("run-", run))
		d, derr := direct.RunDeliveries(fmt.Sprint("run-", run))
		same(fmt.Sprint("RunDeliveries(run-", run, ")"), j, d, jerr, derr)
	}
	jn, jerr := journaled.Count()
	dn, derr := direct.Count()
	same("Count", jn, dn, jerr, derr)
	for i := range n + 1 {
		j, jerr := journaled.Delivery(id(i))
		d, derr := direct.Delivery(id(i))
		if !sameErr(jerr, derr) || !reflect.DeepEqual(j, d) {
			t.Fatalf("%s: Delivery(%s): journal %+v, %v\ndirect %+v, %v", when, id(i), j, jerr, d, derr)
		}
	}
}

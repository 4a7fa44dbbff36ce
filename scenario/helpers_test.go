package scenario_test

import (
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// epoch is when the fixture run's first delivery arrived.
var epoch = time.Date(2026, 11, 22, 10, 4, 5, 0, time.UTC)

// runDeliveries returns a run's three deliveries as a listen records them:
// received 1.25 s and 2.5 s apart, signed, each with its forward attempt,
// and the second with a replay the receiver refused (which a scenario
// leaves out).
func runDeliveries(t *testing.T, runID string) []*devhook.Delivery {
	t.Helper()
	var ds []*devhook.Delivery
	for i, st := range []string{"queued", "running", "succeeded"} {
		body, err := json.Marshal(devhook.NewRunStatus(runID, "app-7", st, epoch.Add(-time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		at := epoch.Add(time.Duration(i) * 1250 * time.Millisecond)
		d := &devhook.Delivery{
			ID: "0190" + string(rune('a'+i)) + "-" + runID, ReceivedAt: at, Method: http.MethodPost, Path: "/hook", RawQuery: "src=svc&run=" + runID,
			Header: http.Header{
				"Content-Type":      {"application/json"},
				"Content-Length":    {"999"},
				"User-Agent":        {"service-webhooks/1"},
				"X-Trace":           {"b", "a"}, // repeated, in the order received
				"Service-Signature": {"t=1,v1=00"},
			},
			Body:    body,
			Verdict: devhook.Verdict{Result: devhook.VerdictOK},
			Attempts: []devhook.Attempt{{Seq: 1, Kind: devhook.AttemptForward, Target: "http://localhost:8080/hook", StartedAt: at, Status: 200,
				Body: []byte(`{"received":true,"run_id":"` + runID + `","status_v2":"` + st + `"}` + "\n")}},
		}
		d.Event = devhook.ParseEvent(body)
		if i == 1 {
			d.Attempts = append(d.Attempts, devhook.Attempt{Seq: 2, Kind: devhook.AttemptReplay, StartedAt: at.Add(time.Hour), Status: 401,
				Body: []byte("Unauthorized: Invalid Time Value")})
		}
		ds = append(ds, d)
	}
	return ds
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from what was written now (go test -update rewrites it):\n--- now\n%s\n--- %s\n%s", path, got, path, want)
	}
}

package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// An export of the last deliveries or of a run (deliveries export, scenario
// save), from a store one list row of which is damaged (storage's record
// fixture), writes every other delivery and says on stderr, as deliveries list does, which record it
// skipped, in which file and what to do: before, the export was short of
// it and said nothing.
func TestExport_SaysWhatTheListSkipped(t *testing.T) {
	const bad = "0195b1c8-0000-7000-8000-000000000011"
	data, dbPath, _ := storeFixtureData(t, "db-record-truncated.db")
	for _, format := range []string{"curl", "har", "scenario"} {
		out := filepath.Join(t.TempDir(), "export."+format)
		args := []string{"deliveries", "export", "--last", "100", "--format", format, "--out", out, "--data", data, "--inspect", closedAddr(t)}
		if format != "scenario" {
			args = append(args, "--to", "http://127.0.0.1:9")
		}
		_, stderr, err := runDevhook(t, args...)
		if err != nil {
			t.Fatalf("export --format %s: %v; stderr %s", format, err, stderr)
		}
		if !containsAllText(stderr, "skipped 1", bad, dbPath, "move it away") {
			t.Errorf("export --format %s: stderr %q; want it to say it skipped the damaged record of %s in %s, and what to do", format, stderr, bad, dbPath)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if format == "scenario" { // it names no delivery id
			_, stderr, err := runDevhook(t, "scenario", "save", filepath.Join(t.TempDir(), "s.json"), "--last", "100", "--data", data, "--inspect", closedAddr(t))
			if err != nil || !containsAllText(stderr, "scenario save: skipped 1", bad, dbPath) {
				t.Errorf("scenario save --last: %v; stderr %q; want it to say it skipped the damaged record of %s", err, stderr, bad)
			}
			continue
		}
		if strings.Contains(string(b), bad) || !strings.Contains(string(b), "0195b1c8-0000-7000-8000-000000000010") {
			t.Errorf("export --format %s: want every delivery but %s", format, bad)
		}
	}
}

// scenario save only reads, as deliveries export does: it opens the store
// read-only. It opened it to write, so that retention removed, before the
// save read them, the deliveries older than its 30 days: saving a scenario
// from an old recording deleted the recording and said there was none.
func TestScenarioSave_KeepsAnOldRecording(t *testing.T) {
	data, _ := bodyFileData(t, "bodies-intact.body") // recorded long ago
	dbPath := filepath.Join(data, "deliveries.db")
	before, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "s.json")
	if _, stderr, err := runDevhook(t, "scenario", "save", out, "--last", "5", "--data", data, "--inspect", closedAddr(t)); err != nil {
		t.Fatalf("scenario save --last 5: %v; stderr %s", err, stderr)
	}
	if after, _ := os.ReadFile(dbPath); !bytes.Equal(after, before) {
		t.Error("scenario save changed the store")
	}
	stdout, _, err := runDevhook(t, "deliveries", "list", "--data", data, "--inspect", closedAddr(t))
	if err != nil || strings.Count(stdout, "0195b1c8-") != bodyFixtureN {
		t.Errorf("deliveries list after scenario save: %v\n%s; want all %d deliveries", err, stdout, bodyFixtureN)
	}
}

// replay and deliveries delete write to the store (the replay's attempt,
// the delete) but are not listen: they keep what listen's retention
// would drop. Before, their open ran the default retention (30 days),
// and a replay of an old recording deleted every delivery of it, the
// one asked for included, then said it was not found.
func TestWritingCommands_KeepAnOldRecording(t *testing.T) {
	data, _ := bodyFileData(t, "bodies-intact.body") // recorded long ago
	const id = "0195b1c8-0000-7000-8000-00000000000a"
	var got atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	if _, stderr, err := runDevhook(t, "replay", id, "--to", rcv.URL, "--data", data, "--inspect", closedAddr(t)); err != nil || got.Load() != 1 {
		t.Fatalf("replay of an old delivery: %v, the receiver got %d; stderr %s", err, got.Load(), stderr)
	}
	if _, stderr, err := runDevhook(t, "deliveries", "delete", "0195b1c8-0000-7000-8000-00000000000b", "--data", data, "--inspect", closedAddr(t)); err != nil {
		t.Fatalf("deliveries delete: %v; stderr %s", err, stderr)
	}
	stdout, _, err := runDevhook(t, "deliveries", "list", "--data", data, "--inspect", closedAddr(t))
	if err != nil || strings.Count(stdout, "0195b1c8-") != bodyFixtureN-1 {
		t.Errorf("deliveries list after replay and delete: %v\n%s; want all %d deliveries but the one deleted", err, stdout, bodyFixtureN-1)
	}
}

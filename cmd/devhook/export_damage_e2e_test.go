package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An export of the last deliveries or of a run (deliveries export, scenario
// save), from a store one list row of which is damaged (storage's record
// fixture), writes every other delivery and says on stderr, as deliveries list does, which record it
// skipped, in which file and what to do: before, the export was short of
// it and said nothing.
func TestExport_SaysWhatTheListSkipped(t *testing.T) {
	const bad = "0195b1c8-0000-7000-8000-000000000011"
	fixture, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", "db-record-truncated.db"))
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(data, "deliveries.db")
	if err := os.WriteFile(dbPath, fixture, 0o600); err != nil {
		t.Fatal(err)
	}
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

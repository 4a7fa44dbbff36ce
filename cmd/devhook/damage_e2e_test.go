package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// Each damaged page kind of deliveries.db, and a file cut short or empty
// (storage/testdata), met by the
// read-only deliveries list and by listen: never a crash; list says what
// is wrong and what to do and touches nothing; listen sets the file aside
// as evidence, says so and stops; the next listen starts with a new file,
// and the deliveries of the journal beside the damaged file are in it.
func TestDamagedPages_ListAndListen(t *testing.T) {
	for _, name := range []string{"db-damaged-meta0.db", "db-damaged-meta1.db", "db-damaged-freelist.db",
		"db-damaged-branch.db", "db-damaged-leaf.db", "db-damaged-overflow.db", "db-truncated.db", "db-empty.db"} {
		t.Run(name, func(t *testing.T) {
			data, dbPath, fixture := storeFixtureData(t, name)
			journal, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", "journal-intact.journal0"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dbPath+".journal0", journal, 0o600); err != nil {
				t.Fatal(err)
			}

			if name == "db-damaged-overflow.db" {
				damagedValueCLI(t, data, fixture)
				return
			}
			for _, args := range [][]string{
				{"deliveries", "list", "--data", data, "--inspect", closedAddr(t)},
				{"deliveries", "show", "0195b1c8-0000-7000-8000-000000000001", "--data", data, "--inspect", closedAddr(t)},
			} {
				_, stderr, err := runDevhook(t, args...)
				if err == nil {
					t.Fatalf("devhook %s succeeded on a damaged store", strings.Join(args[:2], " "))
				}
				for _, want := range []string{dbPath, "damaged", "move it away"} {
					if !strings.Contains(stderr, want) {
						t.Errorf("devhook %s: stderr %q does not say %q", strings.Join(args[:2], " "), stderr, want)
					}
				}
				if got, _ := os.ReadFile(dbPath); !bytes.Equal(got, fixture) {
					t.Fatalf("devhook %s changed the damaged store", strings.Join(args[:2], " "))
				}
				if got, _ := os.ReadFile(dbPath + ".journal0"); !bytes.Equal(got, journal) {
					t.Fatalf("devhook %s changed the journal", strings.Join(args[:2], " "))
				}
			}

			_, stderr, err := runDevhook(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
				"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
			if err == nil {
				t.Fatal("listen started on a damaged store")
			}
			asides, _ := filepath.Glob(dbPath + ".damaged-*")
			if len(asides) != 1 {
				t.Fatalf("set aside: %v, want the damaged store; stderr: %s", asides, stderr)
			}
			for _, want := range []string{dbPath, "damaged", asides[0], "kept as evidence", "start devhook again"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("listen: stderr %q does not say %q", stderr, want)
				}
			}
			if got, _ := os.ReadFile(asides[0]); !bytes.Equal(got, fixture) {
				t.Errorf("%s is not the damaged store as it was", asides[0])
			}
			if got, _ := os.ReadFile(dbPath + ".journal0"); !bytes.Equal(got, journal) {
				t.Fatalf("listen changed the journal beside the damaged store")
			}

			// The next start records in a new file, and applies the journal
			// to it (whose deliveries, from March 2026, retention then
			// removes: storage's TestOpen_DamagedPages counts them).
			p := startProc(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
				"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
			p.nextJSON(t, "ready")
			p.stop(t, 10*time.Second)
			if _, err := os.Stat(dbPath + ".journal0"); !os.IsNotExist(err) {
				t.Errorf("the journal is still there after listen started again: %v", err)
			}
			out, stderr, err := runDevhook(t, "deliveries", "list", "--json", "--data", data, "--inspect", closedAddr(t))
			if err != nil {
				t.Fatalf("deliveries list after the restart: %v; stderr: %s", err, stderr)
			}
			var listed []devhook.Summary
			if err := json.Unmarshal([]byte(out), &listed); err != nil {
				t.Fatalf("deliveries list --json: %v: %s", err, out)
			}
		})
	}
}

// damagedValueCLI: the damage is in a body's bytes (an overflow page), seen
// only when that delivery is read: the list shows every delivery, and
// showing the damaged one fails naming it, the file and what to do (copy
// the file as evidence, delete that delivery),
// without writing anything.
func damagedValueCLI(t *testing.T, data string, fixture []byte) {
	dbPath := filepath.Join(data, "deliveries.db")
	out, stderr, err := runDevhook(t, "deliveries", "list", "--json", "--limit", "100", "--data", data, "--inspect", closedAddr(t))
	if err != nil {
		t.Fatalf("deliveries list: %v; stderr: %s", err, stderr)
	}
	var listed []devhook.Summary
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 24 {
		t.Fatalf("deliveries list --json: %d, %v; want the 24 deliveries", len(listed), err)
	}
	const damaged = "0195b1c8-0000-7000-8000-00000000000c" // storage's largeBody
	_, stderr, err = runDevhook(t, "deliveries", "show", damaged, "--data", data, "--inspect", closedAddr(t))
	if err == nil {
		t.Fatal("deliveries show of the damaged delivery succeeded")
	}
	for _, want := range []string{dbPath, damaged, "checksum", "devhook deliveries delete " + damaged, "evidence"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("deliveries show: stderr %q does not say %q", stderr, want)
		}
	}
	if _, stderr, err := runDevhook(t, "deliveries", "show", "0195b1c8-0000-7000-8000-00000000000b", "--data", data, "--inspect", closedAddr(t)); err != nil {
		t.Errorf("deliveries show of an intact delivery: %v; stderr: %s", err, stderr)
	}
	if got, _ := os.ReadFile(dbPath); !bytes.Equal(got, fixture) {
		t.Fatal("a read-only command changed the store")
	}
}

// The journal's fixtures (storage/testdata), beside an intact store, met
// by deliveries list and by listen: list shows the intact records without
// applying them and says what it found, writing nothing; listen applies
// them, sets a damaged file aside, and refuses a newer format untouched.
func TestDamagedJournals_ListAndListen(t *testing.T) {
	for _, c := range []struct {
		fixture  string
		listed   int      // deliveries list shows
		listSays string   // on stderr
		listErr  bool     // deliveries list fails
		listen   []string // listen fails saying these; nil: it starts
		setAside bool     // listen sets the journal aside
	}{
		{fixture: "journal-torn-tail.journal0", listed: 12, listSays: "shown, not applied"},
		{fixture: "journal-damaged-middle.journal0", listed: 11, listSays: "is damaged", setAside: true},
		{fixture: "journal-wrong-magic.journal0", listed: 0, listSays: "not a devhook journal", setAside: true},
		{fixture: "journal-newer-version.journal0", listErr: true, listSays: "upgrade devhook", listen: []string{"newer devhook", "upgrade devhook"}},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			journal, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", c.fixture))
			if err != nil {
				t.Fatal(err)
			}
			data := filepath.Join(t.TempDir(), "data")
			p := startProc(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
				"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
			p.nextJSON(t, "ready")
			p.stop(t, 10*time.Second)
			dbPath := filepath.Join(data, "deliveries.db")
			jPath := dbPath + ".journal0"
			if err := os.WriteFile(jPath, journal, 0o600); err != nil {
				t.Fatal(err)
			}
			store, _ := os.ReadFile(dbPath)

			out, stderr, err := runDevhook(t, "deliveries", "list", "--json", "--limit", "100", "--data", data, "--inspect", closedAddr(t))
			if c.listErr != (err != nil) {
				t.Fatalf("deliveries list: %v, want failure %v; stderr: %s", err, c.listErr, stderr)
			}
			if !strings.Contains(stderr, c.listSays) || !strings.Contains(stderr, jPath) {
				t.Errorf("deliveries list: stderr %q does not say %q about %s", stderr, c.listSays, jPath)
			}
			if !c.listErr {
				var listed []devhook.Summary
				if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != c.listed {
					t.Errorf("deliveries list: %d deliveries, %v; want %d", len(listed), err, c.listed)
				}
			}
			if got, _ := os.ReadFile(jPath); !bytes.Equal(got, journal) {
				t.Fatal("deliveries list changed the journal")
			}
			if got, _ := os.ReadFile(dbPath); !bytes.Equal(got, store) {
				t.Fatal("deliveries list changed the store")
			}

			if c.listen != nil {
				_, stderr, err := runDevhook(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
					"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
				if err == nil {
					t.Fatal("listen started")
				}
				for _, want := range c.listen {
					if !strings.Contains(stderr, want) {
						t.Errorf("listen: stderr %q does not say %q", stderr, want)
					}
				}
				if got, _ := os.ReadFile(jPath); !bytes.Equal(got, journal) {
					t.Fatal("listen changed the journal it refused")
				}
				return
			}
			p = startProc(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
				"--inspect", "off", "--relay-addr", "127.0.0.1:0", "--data", data)
			p.nextJSON(t, "ready")
			p.stop(t, 10*time.Second)
			asides, _ := filepath.Glob(jPath + ".damaged-*")
			switch {
			case c.setAside && len(asides) != 1:
				t.Fatalf("set aside: %v, want the damaged journal", asides)
			case c.setAside:
				if got, _ := os.ReadFile(asides[0]); !bytes.Equal(got, journal) {
					t.Errorf("%s is not the journal as it was", asides[0])
				}
			case len(asides) != 0:
				t.Errorf("set aside %v, want the journal applied", asides)
			}
			if _, err := os.Stat(jPath); !os.IsNotExist(err) {
				t.Errorf("%s still there after listen: %v", jPath, err)
			}
		})
	}
}

// Storage's record fixtures (one record inside a leaf page damaged, cut
// short, or written by a newer devhook) met by deliveries list, show and
// listen: the list shows every other delivery and says on stderr what it
// skipped, in which file and what to do, changing nothing; show of the
// damaged delivery says it is damaged, naming the file; listen starts,
// says so as it starts, and keeps the file where it is; a list through
// its inspector says the same. No message shows raw bytes.
func TestDamagedRecords_ListAndListen(t *testing.T) {
	const n = 30 // deliveries in the fixtures
	for _, c := range []struct {
		fixture, bad, says string
		showFails          bool
	}{
		{"db-record-damaged.db", "0195b1c8-0000-7000-8000-00000000000e", "move it away", true},
		{"db-record-truncated.db", "0195b1c8-0000-7000-8000-000000000011", "move it away", false},
		{"db-record-newer.db", "0195b1c8-0000-7000-8000-000000000014", "upgrade devhook", false},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			data, dbPath, fixture := storeFixtureData(t, c.fixture)
			plain := func(what, s string) {
				t.Helper()
				if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r != '\n' && unicode.IsControl(r) || r == utf8.RuneError }) {
					t.Errorf("%s: %q shows raw bytes", what, s)
				}
			}

			out, stderr, err := runDevhook(t, "deliveries", "list", "--json", "--limit", "100", "--data", data, "--inspect", closedAddr(t))
			if err != nil {
				t.Fatalf("deliveries list: %v; stderr: %s", err, stderr)
			}
			var listed []devhook.Summary
			if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != n-1 {
				t.Errorf("deliveries list --json: %d deliveries, %v; want the %d intact ones", len(listed), err, n-1)
			}
			for _, want := range []string{"devhook deliveries list: skipped", dbPath, c.bad, c.says} {
				if !strings.Contains(stderr, want) {
					t.Errorf("deliveries list: stderr %q does not say %q", stderr, want)
				}
			}
			plain("deliveries list", stderr)
			_, stderr, err = runDevhook(t, "deliveries", "show", c.bad, "--data", data, "--inspect", closedAddr(t))
			if c.showFails {
				if err == nil {
					t.Error("deliveries show of the damaged delivery succeeded")
				}
				for _, want := range []string{dbPath, c.bad, "damaged", "move it away"} {
					if !strings.Contains(stderr, want) {
						t.Errorf("deliveries show: stderr %q does not say %q", stderr, want)
					}
				}
				plain("deliveries show", stderr)
			} else if err != nil {
				t.Errorf("deliveries show %s (its record intact, its list row not): %v; stderr: %s", c.bad, err, stderr)
			}
			if got, _ := os.ReadFile(dbPath); !bytes.Equal(got, fixture) {
				t.Fatal("a read-only command changed the store")
			}

			p := startProc(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
				"--inspect", "127.0.0.1:0", "--relay-addr", "127.0.0.1:0", "--data", data)
			// Its lines before the ready line are printed right after it.
			var said []string
			var ready map[string]any
			for ready == nil || !strings.Contains(strings.Join(said, "\n"), "lists skip") {
				select {
				case line, ok := <-p.lines:
					if !ok {
						t.Fatalf("listen ended before it was ready; stderr: %s", p.stderr)
					}
					var m map[string]any
					if json.Unmarshal([]byte(line), &m) != nil {
						continue
					}
					switch m["event"] {
					case "log":
						said = append(said, m["message"].(string))
					case "ready":
						ready = m
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("listen not ready, or said nothing of the damaged record, within 30s: %q; stderr: %s", said, p.stderr)
				}
			}
			all := strings.Join(said, "\n")
			for _, want := range []string{dbPath, c.bad, "lists skip", c.says} {
				if !strings.Contains(all, want) {
					t.Errorf("listen said %q at start, not %q", said, want)
				}
			}
			plain("listen", all)
			// Through the running listen's inspector, the list says it too.
			_, stderr, err = runDevhook(t, "deliveries", "list", "--data", data)
			if err != nil || !strings.Contains(stderr, "skipped") || !strings.Contains(stderr, dbPath) {
				t.Errorf("deliveries list through listen's inspector: %v; stderr %q, want what it skipped", err, stderr)
			}
			p.stop(t, 10*time.Second)
			if asides, _ := filepath.Glob(dbPath + ".damaged-*"); len(asides) != 0 {
				t.Errorf("listen set the store aside (%v): a damaged record is that record's problem", asides)
			}
		})
	}
}

// storeFixtureData is a data directory whose store deliveries.db (dbPath)
// is a copy of storage/testdata/name, whose bytes are fixture.
func storeFixtureData(t *testing.T, name string) (data, dbPath string, fixture []byte) {
	t.Helper()
	fixture, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	data = filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	dbPath = filepath.Join(data, "deliveries.db")
	if err := os.WriteFile(dbPath, fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	return data, dbPath, fixture
}

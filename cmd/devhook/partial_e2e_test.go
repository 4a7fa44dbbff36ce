package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
	"github.com/devhook/devhook/storage"
)

// The body file fixtures of storage (storage/testdata): db-bodyfiles.db
// holds bodyFixtureN deliveries, storage's id(0) to id(11), whose bodies
// are in its body file 00000001; bodies-damaged-middle.body is that file
// with one bit flipped in the body of delivery bodyFixtureDamaged.
const (
	bodyFixtureN       = 12
	bodyFixtureDamaged = 5
)

func bodyFixtureID(i int) string { return fmt.Sprintf("0195b1c8-%04x-7000-8000-%012x", i>>16, i) }

// bodyFileData is a data directory whose store is db-bodyfiles.db with
// its body file fixture bodies (storage/testdata).
func bodyFileData(t *testing.T, bodies string) (data, bodyFile string) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data = filepath.Join(t.TempDir(), "data")
	bodyFile = filepath.Join(data, "deliveries.db.bodies", "00000001")
	if err := os.MkdirAll(filepath.Dir(bodyFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "deliveries.db"), read("db-bodyfiles.db"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bodyFile, read(bodies), 0o600); err != nil {
		t.Fatal(err)
	}
	return data, bodyFile
}

// exitCodeOf is the exit status of a devhook that ended with err.
func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// A delivery whose body cannot be read (its body file damaged): show
// prints all the rest of it, says plainly that the body cannot be read,
// where and why, and exits 1; --json too, with body_error. Replaying it
// is refused, nothing sent. The others show as before.
func TestShow_BodyUnreadable(t *testing.T) {
	data, bodyFile := bodyFileData(t, "bodies-damaged-middle.body")
	evidence, _ := os.ReadFile(bodyFile)
	broken := bodyFixtureID(bodyFixtureDamaged)
	inspect := closedAddr(t)

	stdout, stderr, err := runDevhook(t, "deliveries", "show", broken, "--data", data, "--inspect", inspect)
	if code := exitCodeOf(err); code != 1 {
		t.Errorf("show: exit status %d (%v), want 1", code, err)
	}
	for _, want := range []string{"delivery  " + broken, "request   POST /hook", "verdict   ok", "Content-Type: application/json",
		"body (cannot be read)", bodyFile, "do not match its checksum", "deliveries delete " + broken} {
		if !strings.Contains(stdout, want) {
			t.Errorf("show's output does not say %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "partly unreadable") || !strings.Contains(stderr, "the rest of it is shown") {
		t.Errorf("show's stderr %q, want it to say the delivery is partly unreadable and the rest shown", stderr)
	}

	stdout, _, err = runDevhook(t, "deliveries", "show", broken, "--json", "--data", data, "--inspect", inspect)
	var d struct {
		ID        string `json:"id"`
		Method    string `json:"method"`
		BodyError string `json:"body_error"`
		Body      []byte `json:"body"`
	}
	if jerr := json.Unmarshal([]byte(stdout), &d); jerr != nil || exitCodeOf(err) != 1 {
		t.Fatalf("show --json: %v, exit status %d; output %q", jerr, exitCodeOf(err), stdout)
	}
	if d.ID != broken || d.Method != "POST" || d.Body != nil || !strings.Contains(d.BodyError, bodyFile) || !strings.Contains(stdout, `"body_error"`) {
		t.Errorf("show --json: %+v, want the delivery with body_error naming %s and no body", d, bodyFile)
	}

	if _, stderr, err := runDevhook(t, "deliveries", "show", bodyFixtureID(bodyFixtureDamaged+1), "--data", data, "--inspect", inspect); err != nil {
		t.Errorf("show of another delivery: %v %s", err, stderr)
	}

	if got, _ := os.ReadFile(bodyFile); !bytes.Equal(got, evidence) {
		t.Errorf("the damaged body file was changed: evidence is kept as it is")
	}
}

// cutBodyData is a data directory holding one delivery, d, whose body
// file is cut short: its body cannot be read.
func cutBodyData(t *testing.T) (data string, d *devhook.Delivery) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "data")
	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"big":"` + strings.Repeat("x", 4000) + `"}`)
	d = &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now(), Method: http.MethodPost, Path: "/hook",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Verdict: devhook.Verdict{Result: devhook.VerdictUnchecked}}
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bodyFile := filepath.Join(data, "deliveries.db.bodies", "00000001")
	if err := os.Truncate(bodyFile, 100); err != nil {
		t.Fatal(err)
	}
	return data, d
}

// Replaying a delivery whose body cannot be read (its body file cut
// short) is refused, saying why, and nothing is sent.
func TestReplay_BodyUnreadable(t *testing.T) {
	data, d := cutBodyData(t)
	var sent atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent.Add(1) }))
	defer recv.Close()
	for _, args := range [][]string{{}, {"--header", "X-Edit: 1"}} {
		_, stderr, err := runDevhook(t, append([]string{"replay", d.ID, "--to", recv.URL, "--data", data, "--inspect", closedAddr(t)}, args...)...)
		if exitCodeOf(err) != 1 || !strings.Contains(stderr, "cannot replay") || !strings.Contains(stderr, "cut short") || !strings.Contains(stderr, "nothing was sent") {
			t.Errorf("replay %q: %v, stderr %q; want it refused, saying why", args, err, stderr)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("the receiver got %d requests of a delivery whose body cannot be read", n)
	}
}

// Replaying a delivery whose body cannot be read with --body, which
// replaces that body whole, needs nothing unreadable: it is sent with the
// body given (from a file or standard input, its headers edited too) and
// recorded as edited. Before, it was refused as a plain replay is. --edit
// alone would edit the recorded body: refused, the editor never run.
func TestReplay_BodyUnreadableReplaced(t *testing.T) {
	data, d := cutBodyData(t)
	type seen struct{ body, edit string }
	var mu sync.Mutex
	var got []seen
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{string(b), r.Header.Get("X-Edit")})
		mu.Unlock()
	}))
	defer recv.Close()
	file := filepath.Join(t.TempDir(), "fixed.json")
	if err := os.WriteFile(file, []byte(`{"fixed":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	inspect := closedAddr(t)
	base := []string{"replay", d.ID, "--to", recv.URL, "--data", data, "--inspect", inspect}
	stdout, stderr, err := runDevhook(t, append(base, "--body", file)...)
	if err != nil || !strings.Contains(stdout, "200") || !strings.Contains(stdout, "(edited") {
		t.Errorf("replay --body FILE: %v, stdout %q, stderr %q; want it sent, edited", err, stdout, stderr)
	}
	stdout, stderr, err = runDevhookIn(t, `{"stdin":1}`, nil, append(base, "--body", "-", "--header", "X-Edit: 1")...)
	if err != nil || !strings.Contains(stdout, "200") {
		t.Errorf("replay --body - --header: %v, stdout %q, stderr %q; want it sent", err, stdout, stderr)
	}
	// An empty body in its place is an edit too: the one it replaces is
	// not empty, only unreadable (before, recorded as not edited).
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err = runDevhook(t, append(base, "--body", empty)...)
	if err != nil || !strings.Contains(stdout, "(edited") {
		t.Errorf("replay --body EMPTY: %v, stdout %q, stderr %q; want it sent, edited", err, stdout, stderr)
	}
	marker := filepath.Join(t.TempDir(), "editor-ran")
	_, stderr, err = runDevhookIn(t, "", []string{"EDITOR=touch " + marker + " #"}, append(base, "--edit")...)
	if exitCodeOf(err) != 1 || !strings.Contains(stderr, "cannot replay") || !strings.Contains(stderr, "cut short") {
		t.Errorf("replay --edit: %v, stderr %q; want it refused: it edits the body that cannot be read", err, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("replay --edit ran the editor on a body that cannot be read")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []seen{{`{"fixed":1}`, ""}, {`{"stdin":1}`, "1"}, {"", ""}}; !slices.Equal(got, want) {
		t.Errorf("the receiver got %q, want %q", got, want)
	}
	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{ReadOnly: true, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rd, _ := db.Delivery(d.ID)
	if rd == nil || len(rd.Attempts) != 3 || !rd.Attempts[0].Edited() || !rd.Attempts[1].Edited() || !rd.Attempts[2].Edited() || rd.BodyError == "" {
		t.Errorf("recorded: %+v, want three edited attempts, the body still unreadable", rd)
	}
}

// Replaying a delivery one of whose attempts cannot be read (its value
// damaged), its body whole, sends it as it arrived, and with an edit:
// the unreadable attempt is its history, not the request. Before, it was
// refused as for a delivery whose body cannot be read.
func TestReplay_AttemptUnreadable(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(data, "deliveries.db")
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"small":1}`)
	d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now(), Method: http.MethodPost, Path: "/hook",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Verdict: devhook.Verdict{Result: devhook.VerdictUnchecked}}
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddAttempt(d.ID, devhook.Attempt{Kind: devhook.AttemptForward, Target: "http://127.0.0.1:1/hook", Status: 500, Body: []byte(strings.Repeat("e", 100))}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("attempts"))
		k := binary.BigEndian.AppendUint32(append([]byte(d.ID), 0), 1)
		v := append([]byte{}, b.Get(k)...)
		v[len(v)/2] ^= 0x10
		return b.Put(k, v)
	})
	if cerr := bdb.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	type seen struct {
		body string
		edit string
	}
	var mu sync.Mutex
	var got []seen
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{string(b), r.Header.Get("X-Edit")})
		mu.Unlock()
	}))
	defer recv.Close()
	for _, args := range [][]string{{}, {"--header", "X-Edit: 1"}} {
		stdout, stderr, err := runDevhook(t, append([]string{"replay", d.ID, "--to", recv.URL, "--data", data, "--inspect", closedAddr(t)}, args...)...)
		if err != nil || !strings.Contains(stdout, "200") {
			t.Errorf("replay %q: %v, stdout %q, stderr %q; want it sent", args, err, stdout, stderr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []seen{{string(body), ""}, {string(body), "1"}}; !slices.Equal(got, want) {
		t.Errorf("the receiver got %q, want %q", got, want)
	}
}

// Exporting deliveries one of which has a body that cannot be read writes
// every other one whole, and that one as partial, never with a made-up
// body (curl: a comment, not a command; har: marked, no body; scenario:
// left out, as it would be played); it says on stderr which and why, and
// exits 1 at the end.
func TestExport_BodyUnreadable(t *testing.T) {
	data, bodyFile := bodyFileData(t, "bodies-damaged-middle.body")
	broken := bodyFixtureID(bodyFixtureDamaged)
	inspect := closedAddr(t)
	dir := t.TempDir()
	for _, format := range []string{"curl", "har", "scenario"} {
		t.Run(format, func(t *testing.T) {
			out := filepath.Join(dir, "export."+format)
			args := []string{"deliveries", "export", "--last", fmt.Sprint(bodyFixtureN), "--format", format, "--out", out, "--data", data, "--inspect", inspect}
			if format != "scenario" {
				args = append(args, "--to", "http://127.0.0.1:9")
			}
			_, stderr, err := runDevhook(t, args...)
			if code := exitCodeOf(err); code != 1 {
				t.Errorf("export: exit status %d (%v), want 1", code, err)
			}
			for _, want := range []string{broken, bodyFile, "1 of the 12 deliveries exported is partial", "exiting with failure status"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("export's stderr does not say %q:\n%s", want, stderr)
				}
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			switch format {
			case "curl":
				if n := strings.Count(string(b), "\ncurl "); n != bodyFixtureN-1 {
					t.Errorf("the script has %d curl commands, want %d: all but the one whose body cannot be read", n, bodyFixtureN-1)
				}
				if !strings.Contains(string(b), "# "+fmt.Sprint(bodyFixtureDamaged+1)+"/12 delivery "+broken) || !strings.Contains(string(b), "#   not sent: its body cannot be read") {
					t.Errorf("the script does not say that delivery %s is not sent, and why:\n%s", broken, b)
				}
			case "har":
				var har struct {
					Log struct {
						Entries []struct {
							Request struct {
								BodySize int             `json:"bodySize"`
								PostData json.RawMessage `json:"postData"`
							} `json:"request"`
							Devhook struct{ Delivery, Partial string } `json:"_devhook"`
						} `json:"entries"`
					} `json:"log"`
				}
				if err := json.Unmarshal(b, &har); err != nil || len(har.Log.Entries) != bodyFixtureN {
					t.Fatalf("HAR: %v, %d entries, want %d", err, len(har.Log.Entries), bodyFixtureN)
				}
				for _, e := range har.Log.Entries {
					partial := e.Devhook.Delivery == broken
					switch {
					case partial && (!strings.Contains(e.Devhook.Partial, bodyFile) || e.Request.PostData != nil || e.Request.BodySize != -1):
						t.Errorf("the entry of %s: %+v, want it marked partial, with no body and bodySize -1", broken, e)
					case !partial && (e.Devhook.Partial != "" || e.Request.PostData == nil):
						t.Errorf("the entry of %s: %+v, want it whole", e.Devhook.Delivery, e)
					}
				}
			case "scenario":
				s, err := scenario.Parse(out, b)
				if err != nil || len(s.Deliveries) != bodyFixtureN-1 || strings.Contains(string(b), broken) {
					t.Errorf("scenario: %v, %d deliveries; want the %d whole ones, without %s", err, len(s.Deliveries), bodyFixtureN-1, broken)
				}
			}
		})
	}
	// Whole deliveries only: as before.
	_, stderr, err := runDevhook(t, "deliveries", "export", bodyFixtureID(0), bodyFixtureID(1), "--to", "http://127.0.0.1:9", "--data", data, "--inspect", inspect)
	if err != nil {
		t.Errorf("export of whole deliveries: %v %s", err, stderr)
	}
}

// What the store says as a command opens it (a journal a stopped devhook
// left, body files missing) comes as the command's own lines on stderr,
// "devhook: …", not log lines with a date, and in words that fit the
// command: before, list and export printed "2026/11/28 04:41:47 storage:
// …", and replay "… and the others are recorded as before".
func TestStoreNotices_CommandLines(t *testing.T) {
	dated := regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d `)
	check := func(t *testing.T, what, stderr string, want ...string) {
		t.Helper()
		if dated.MatchString(stderr) || strings.Contains(stderr, "recorded as before") {
			t.Errorf("%s: stderr %q, want the store's notices as devhook's own lines, in words that fit", what, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q does not say %q", what, stderr, w)
			}
		}
	}
	t.Run("journal left, read-only", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			t.Fatal(err)
		}
		for from, to := range map[string]string{"db-records.db": "deliveries.db", "journal-intact.journal0": "deliveries.db.journal0"} {
			b, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", from))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(data, to), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		inspect := closedAddr(t)
		for _, args := range [][]string{{"deliveries", "list"}, {"deliveries", "export", "--last", "1", "--to", "http://127.0.0.1:9"}} {
			_, stderr, err := runDevhook(t, append(args, "--data", data, "--inspect", inspect)...)
			if err != nil {
				t.Errorf("%s: %v", args[1], err)
			}
			check(t, args[1], stderr, "devhook: journal "+filepath.Join(data, "deliveries.db.journal0"), "shown, not applied")
		}
	})
	t.Run("body file missing, replay", func(t *testing.T) {
		data, d := cutBodyData(t)
		if err := os.RemoveAll(filepath.Join(data, "deliveries.db.bodies")); err != nil {
			t.Fatal(err)
		}
		recv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer recv.Close()
		_, stderr, err := runDevhookIn(t, `{"fixed":1}`, nil, "replay", d.ID, "--body", "-", "--to", recv.URL, "--data", data, "--inspect", closedAddr(t))
		if err != nil {
			t.Errorf("replay: %v", err)
		}
		check(t, "replay", stderr, "devhook: 1 body of a recorded delivery is in body files missing from", "read without their bodies")
	})
}

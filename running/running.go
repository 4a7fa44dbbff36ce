// Package running is the file by which a running devhook listen can be
// found: listen.json in its data directory.
//
// listen writes it once its channel is open and its inspector serves, and
// removes it on exit. Commands that read deliveries (deliveries, replay,
// scenario save) and send without a URL read it from the data directory
// they use (~/.devhook, or --data), so that they reach the listen wherever
// its inspector and relay listen; --inspect is needed only to name an
// inspector by its address.
//
// The file, JSON with mode 0600:
//
//	{"pid":1234,"data":"/home/me/.devhook","inspector_url":"http://127.0.0.1:4040",
//	 "public_url":"http://127.0.0.1:4041/c/…","relay_url":"http://127.0.0.1:4041",
//	 "channel":"…","webhook":"devhook-…","started_at":"2026-11-26T01:02:03Z"}
//
// inspector_url is empty when listen runs with --inspect off; webhook is
// empty without --register or --webhook. The file holds nothing that is
// not also elsewhere (listen prints all of it), so one left by a killed
// listen is not evidence: Read reports it as stale (its pid is gone), and
// the next listen of the directory writes over it. It is written to a
// temporary file and renamed, so a reader never sees half of it; a file
// that is not valid JSON anyway (written by hand, a full disk under
// another tool) is reported as damaged and also written over.
package running

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FileName is the file's name in the data directory.
const FileName = "listen.json"

// Listen is what a running devhook listen says about itself.
type Listen struct {
	PID          int       `json:"pid"`
	Data         string    `json:"data"`
	InspectorURL string    `json:"inspector_url,omitempty"`
	PublicURL    string    `json:"public_url"`
	RelayURL     string    `json:"relay_url,omitempty"`
	Channel      string    `json:"channel,omitempty"`
	Webhook      string    `json:"webhook,omitempty"`
	StartedAt    time.Time `json:"started_at"`
}

var (
	// ErrNotRunning: the directory has no listen.json.
	ErrNotRunning = errors.New("no devhook listen runs with this data directory")
	// ErrStale: listen.json names a process that is gone (a killed
	// listen left it).
	ErrStale = errors.New("the devhook listen that wrote it is gone")
	// ErrDamaged: listen.json is not a listen's file.
	ErrDamaged = errors.New("not a devhook listen's file")
)

// Path is the file's path in data directory dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Write writes l into dir's listen.json, replacing what is there, and
// returns the function that removes it again: it removes the file only
// while it still names l's process, so a later listen's file stays.
func Write(dir string, l Listen) (remove func() error, err error) {
	if l.PID <= 0 {
		return nil, fmt.Errorf("running: write %s: pid %d is not a process", Path(dir), l.PID)
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("running: write %s: %w", Path(dir), err)
	}
	path := Path(dir)
	tmp := fmt.Sprintf("%s.%d.tmp", path, l.PID)
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write where this listen can be reached (%s): %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write where this listen can be reached (%s): %w", path, err)
	}
	return func() error {
		cur, err := readFile(path)
		if errors.Is(err, ErrNotRunning) || (err == nil && cur.PID != l.PID) {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	}, nil
}

// Read returns the listen that runs with data directory dir. Its error
// wraps ErrNotRunning when there is no file, ErrDamaged when the file is
// not a listen's, and ErrStale when the process it names is gone; with
// ErrStale, the Listen that was is returned too.
//
// A live pid is not proof: a pid can be reused. Callers that reach the
// listen confirm it (its inspector serves this directory, or the store is
// locked).
func Read(dir string) (Listen, error) {
	l, err := readFile(Path(dir))
	if err != nil {
		return Listen{}, err
	}
	if !alive(l.PID) {
		return l, fmt.Errorf("%s names pid %d: %w", Path(dir), l.PID, ErrStale)
	}
	return l, nil
}

func readFile(path string) (Listen, error) {
	var l Listen
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, fmt.Errorf("%w (%s: no such file)", ErrNotRunning, path)
	} else if err != nil {
		return l, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return Listen{}, fmt.Errorf("%s: %w (%w); the next devhook listen writes over it", path, ErrDamaged, err)
	}
	if l.PID <= 0 {
		return Listen{}, fmt.Errorf("%s: %w (no pid); the next devhook listen writes over it", path, ErrDamaged)
	}
	return l, nil
}

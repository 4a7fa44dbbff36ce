package auth_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
)

func TestValidSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"default", true},
		{"work", true},
		{"my.session", true},
		{"..a", true},
		{"a..", true},
		{"-", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"../x", false},
		{"../../etc", false},
		{"/abs", false},
		{"x/", false},
		{`a\b`, false},
		{`..\x`, false},
		{"nul\x00byte", false},
	} {
		err := auth.ValidSession(tc.name)
		if tc.ok && err != nil {
			t.Errorf("ValidSession(%q) = %v, want nil", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, auth.ErrInvalidSession) {
			t.Errorf("ValidSession(%q) = %v, want ErrInvalidSession", tc.name, err)
		}
	}
}

// TestStoreRefusesTraversal: no operation of the store reaches outside its
// directory, whatever the name.
func TestStoreRefusesTraversal(t *testing.T) {
	root := t.TempDir()
	s := mustStore(t, filepath.Join(root, "home", ".service", "auth"))
	tok := &auth.Tokens{AccessToken: "at", RefreshToken: "rt", TokenType: "Bearer"}
	for _, name := range []string{"", ".", "..", "../escape", "../../escape", `..\escape`, "a/b", "/tmp/x"} {
		if err := s.Save(name, tok); !errors.Is(err, auth.ErrInvalidSession) {
			t.Errorf("Save(%q) = %v, want ErrInvalidSession", name, err)
		}
		if got, err := s.Load(name); !errors.Is(err, auth.ErrInvalidSession) || got != nil {
			t.Errorf("Load(%q) = %v, %v, want ErrInvalidSession", name, got, err)
		}
		if err := s.Delete(name); !errors.Is(err, auth.ErrInvalidSession) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidSession", name, err)
		}
		if _, err := s.Path(name); !errors.Is(err, auth.ErrInvalidSession) {
			t.Errorf("Path(%q) = %v, want ErrInvalidSession", name, err)
		}
	}
	// Nothing was created anywhere.
	var files []string
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && p != root {
			files = append(files, p)
		}
		return nil
	})
	if len(files) > 0 {
		t.Errorf("refused names created %v", files)
	}
	if _, err := auth.NewStore("relative/dir"); err == nil {
		t.Error("NewStore with a relative directory: no error")
	}
}

func mustStore(t *testing.T, dir string) *auth.Store {
	t.Helper()
	s, err := auth.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExpired(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		expires time.Time
		want    bool
	}{
		{"absent", time.Time{}, false},
		{"past", now.Add(-time.Hour), true},
		{"now", now, true},
		{"in 29 s", now.Add(29 * time.Second), true},
		{"in 30 s", now.Add(30 * time.Second), true},
		{"in 30.001 s", now.Add(30*time.Second + time.Millisecond), false},
		{"in 31 s", now.Add(31 * time.Second), false},
		{"in an hour", now.Add(time.Hour), false},
		{"in 31 s, another zone", now.Add(31 * time.Second).In(time.FixedZone("x", 2*3600)), false},
	} {
		tok := &auth.Tokens{AccessToken: "at", ExpiresAt: tc.expires}
		if got := tok.Expired(now); got != tc.want {
			t.Errorf("%s: Expired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestStoreSaveLoadDelete(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, ".service", "auth")
	s := mustStore(t, dir)

	// Nothing stored: Load returns nothing, Delete is silent.
	if got, err := s.Load("default"); got != nil || err != nil {
		t.Fatalf("Load of nothing = %v, %v; want nil, nil", got, err)
	}
	if err := s.Delete("default"); err != nil {
		t.Fatalf("Delete of nothing: %v", err)
	}

	exp := time.Date(2026, 3, 4, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	tok := &auth.Tokens{AccessToken: "at-1", RefreshToken: "rt-1", TokenType: "Bearer", ExpiresAt: exp, IDToken: "id-1"}
	if err := s.Save("work", tok); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "work", "tokens.json")
	for _, tc := range []struct {
		path string
		want os.FileMode
	}{
		{filepath.Join(home, ".service"), 0o700},
		{dir, 0o700},
		{filepath.Join(dir, "work"), 0o700},
		{p, 0o600},
	} {
		if got := mode(t, tc.path); got != tc.want {
			t.Errorf("mode of %s = %o, want %o", tc.path, got, tc.want)
		}
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"access_token": "at-1", "refresh_token": "rt-1", "token_type": "Bearer",
		"expires_at": "2026-03-04T12:00:00+00:00"} {
		if m[k] != want {
			t.Errorf("file field %s = %v, want %v (file %s)", k, m[k], want, raw)
		}
	}
	got, err := s.Load("work")
	if err != nil || got == nil {
		t.Fatalf("Load = %v, %v", got, err)
	}
	if got.AccessToken != "at-1" || got.RefreshToken != "rt-1" || !got.ExpiresAt.Equal(exp) || got.IDToken != "id-1" {
		t.Errorf("Load = %+v", got)
	}

	// Overwrite: still 0600, no temporary file left behind.
	tok.AccessToken = "at-2"
	if err := s.Save("work", tok); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, p); got != 0o600 {
		t.Errorf("mode after overwrite = %o", got)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "work"))
	if len(ents) != 1 {
		t.Errorf("session directory holds %d entries, want only tokens.json", len(ents))
	}
	if got, _ := s.Load("work"); got.AccessToken != "at-2" {
		t.Errorf("after overwrite, access token %q", got.AccessToken)
	}
	// Another session is another file.
	if got, _ := s.Load("default"); got != nil {
		t.Errorf("session default sees %+v", got)
	}

	if err := s.Delete("work"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load("work"); got != nil || err != nil {
		t.Errorf("Load after Delete = %v, %v", got, err)
	}
	if err := s.Delete("work"); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

// TestTokenFileFormats: files written by other clients load; fields devhook
// does not know survive a save; a damaged file is an error that says what
// to do.
func TestTokenFileFormats(t *testing.T) {
	want := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, file string
		expires    time.Time
		wantErr    string
	}{
		{"offset", `{"access_token":"a","refresh_token":"r","token_type":"Bearer","expires_at":"2026-03-04T12:00:00+00:00"}`, want, ""},
		{"Z", `{"access_token":"a","expires_at":"2026-03-04T12:00:00Z"}`, want, ""},
		{"other offset", `{"access_token":"a","expires_at":"2026-03-04T14:00:00+02:00"}`, want, ""},
		{"microseconds", `{"access_token":"a","expires_at":"2026-03-04T12:00:00.000000+00:00"}`, want, ""},
		{"no offset is UTC", `{"access_token":"a","expires_at":"2026-03-04T12:00:00.000000"}`, want, ""},
		{"absent", `{"access_token":"a"}`, time.Time{}, ""},
		{"null", `{"access_token":"a","expires_at":null}`, time.Time{}, ""},
		{"bad time", `{"access_token":"a","expires_at":"tomorrow"}`, time.Time{}, "devhook login"},
		{"not JSON", `{"access_token":`, time.Time{}, "damaged"},
		{"not a string", `{"access_token":1}`, time.Time{}, "damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "s"), 0o700)
			os.WriteFile(filepath.Join(dir, "s", "tokens.json"), []byte(tc.file), 0o600)
			got, err := mustStore(t, dir).Load("s")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.ExpiresAt.Equal(tc.expires) {
				t.Errorf("expires_at = %v, want %v", got.ExpiresAt, tc.expires)
			}
		})
	}

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "s"), 0o700)
	os.WriteFile(filepath.Join(dir, "s", "tokens.json"), []byte(`{"access_token":"a","scope":"openid email","expires_in":3600,"custom":{"x":1}}`), 0o600)
	s := mustStore(t, dir)
	tok, err := s.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	tok.AccessToken = "b"
	if err := s.Save("s", tok); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "s", "tokens.json"))
	var m map[string]any
	json.Unmarshal(raw, &m)
	if m["access_token"] != "b" || m["scope"] != "openid email" || m["custom"] == nil {
		t.Errorf("fields of another client were not kept: %s", raw)
	}
	if _, ok := m["expires_at"]; ok {
		t.Errorf("a record without expires_at gained one: %s", raw)
	}
}

// A damaged token file's error keeps the decoder's in its chain, so a
// caller can tell where the file is damaged (errors.As).
func TestDamagedTokenFileKeepsTheCause(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "s"), 0o700)
	os.WriteFile(filepath.Join(dir, "s", "tokens.json"), []byte(`{"access_token":`), 0o600)
	_, err := mustStore(t, dir).Load("s")
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Load = %v, want the damaged file's error with a *json.SyntaxError in its chain", err)
	}
}

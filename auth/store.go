package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultSession is the session name of a profile without auth_session:
// such profiles share one token file.
const DefaultSession = "default"

// ExpiryMargin is how long before expires_at a token counts as expired.
const ExpiryMargin = 30 * time.Second

// DefaultExpiresIn is the lifetime of a token whose answer has no expires_in.
const DefaultExpiresIn = 3600 * time.Second

// expiresAtLayout writes expires_at as ISO 8601 with a UTC offset
// ("+00:00"), which every client of the file reads.
const expiresAtLayout = "2006-01-02T15:04:05-07:00"

// ErrInvalidSession is the error of a session name that is not one plain
// path element.
var ErrInvalidSession = errors.New("invalid session name")

// ValidSession checks a session name: one path element, not empty, not
// "." or "..", without "/" or "\" (or NUL). Anything else could escape the
// auth directory and is refused.
func ValidSession(name string) error {
	var why string
	switch {
	case name == "":
		why = "it is empty"
	case name == "." || name == "..":
		why = "it is " + name
	case strings.ContainsAny(name, `/\`):
		why = `it contains "/" or "\"`
	case strings.ContainsRune(name, 0):
		why = "it contains a NUL byte"
	default:
		return nil
	}
	return fmt.Errorf("%w %q: %s; use one plain name such as %q (--session, or auth_session: in ~/.service/config.yaml)", ErrInvalidSession, name, why, DefaultSession)
}

// Tokens is the stored token record, ~/.service/auth/<session>/tokens.json.
// Fields of the file other than these are kept as they are.
type Tokens struct {
	AccessToken  string
	RefreshToken string
	TokenType    string
	// ExpiresAt is when the access token expires; zero when the record has
	// no expires_at (such a token counts as not expired).
	ExpiresAt time.Time
	// IDToken is the OpenID id token of the last answer, when it had one.
	IDToken string
	// TokenEndpoint and ClientID say where the tokens came from, so that a
	// refresh goes back there; empty in a file another client wrote.
	TokenEndpoint string
	ClientID      string
	// Extra holds the record's other fields, written back unchanged.
	Extra map[string]json.RawMessage
}

// Expired reports whether the access token counts as expired at now: when
// expires_at is past or within ExpiryMargin. Without expires_at it does not.
func (t *Tokens) Expired(now time.Time) bool {
	if t.ExpiresAt.IsZero() {
		return false
	}
	return !t.ExpiresAt.After(now.Add(ExpiryMargin))
}

// known are the fields Tokens has names for.
var knownFields = []string{"access_token", "refresh_token", "token_type", "expires_at", "id_token", "token_endpoint", "client_id"}

// MarshalJSON writes the record: its fields, expires_at with a UTC offset,
// and Extra.
func (t Tokens) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(t.Extra)+len(knownFields))
	for k, v := range t.Extra {
		m[k] = v
	}
	m["access_token"] = t.AccessToken
	m["refresh_token"] = t.RefreshToken
	m["token_type"] = t.TokenType
	if !t.ExpiresAt.IsZero() {
		m["expires_at"] = t.ExpiresAt.UTC().Format(expiresAtLayout)
	} else {
		delete(m, "expires_at")
	}
	for k, v := range map[string]string{"id_token": t.IDToken, "token_endpoint": t.TokenEndpoint, "client_id": t.ClientID} {
		if v != "" {
			m[k] = v
		} else {
			delete(m, k)
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads a record. expires_at may be any ISO 8601 time; one
// without an offset is taken as UTC.
func (t *Tokens) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if m == nil {
		return errors.New("the token record is null, not an object")
	}
	*t = Tokens{}
	str := func(k string) (string, error) {
		raw, ok := m[k]
		delete(m, k)
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s is not a string", k)
		}
		return s, nil
	}
	var err error
	for _, f := range []struct {
		k string
		v *string
	}{{"access_token", &t.AccessToken}, {"refresh_token", &t.RefreshToken}, {"token_type", &t.TokenType},
		{"id_token", &t.IDToken}, {"token_endpoint", &t.TokenEndpoint}, {"client_id", &t.ClientID}} {
		if *f.v, err = str(f.k); err != nil {
			return err
		}
	}
	exp, err := str("expires_at")
	if err != nil {
		return err
	}
	if exp != "" {
		if t.ExpiresAt, err = parseExpiresAt(exp); err != nil {
			return err
		}
	}
	if len(m) > 0 {
		t.Extra = m
	}
	return nil
}

func parseExpiresAt(s string) (time.Time, error) {
	if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return ts.UTC(), nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if ts, err := time.Parse(layout, s); err == nil {
			return ts.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("expires_at %q is not an ISO 8601 time", s)
}

// Store keeps token records under a directory, normally ~/.service/auth:
// one directory per session holding tokens.json.
type Store struct {
	dir string
}

// NewStore returns the store under dir, an absolute path such as
// ~/.service/auth (see DefaultDir). Nothing is created until Save.
func NewStore(dir string) (*Store, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("the token directory %q must be an absolute path (such as ~/.service/auth)", dir)
	}
	return &Store{dir: filepath.Clean(dir)}, nil
}

// DefaultDir is ~/.service/auth.
func DefaultDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", fmt.Errorf("find the home directory for ~/.service/auth (set HOME): %w", err)
	}
	return filepath.Join(home, ".service", "auth"), nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the token file of a session, after checking its name.
func (s *Store) Path(session string) (string, error) {
	if err := ValidSession(session); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, session, "tokens.json"), nil
}

// Load returns the session's tokens, or nil (and no error) when none are stored.
func (s *Store) Load(session string) (*Tokens, error) {
	p, err := s.Path(session)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read the tokens of session %q: %w", session, err)
	}
	var t Tokens
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("the token file %s is damaged (%w): sign in again with devhook login --session %s", p, err, session)
	}
	return &t, nil
}

// Save writes the session's tokens: missing directories are made with mode
// 0700, the file is written to a temporary file beside it with mode 0600
// and renamed over the old one, so a reader sees the old record or the new.
func (s *Store) Save(session string, t *Tokens) error {
	p, err := s.Path(session)
	if err != nil {
		return err
	}
	if t == nil || t.AccessToken == "" {
		return fmt.Errorf("save the tokens of session %q: there is no access token to save", session)
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the tokens of session %q: %w", session, err)
	}
	b = append(b, '\n')
	if err := mkdirAll(filepath.Dir(p)); err != nil {
		return fmt.Errorf("create the token directory of session %q: %w", session, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tokens-*.json")
	if err != nil {
		return fmt.Errorf("save the tokens of session %q: %w", session, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("save the tokens of session %q: %w", session, err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("save the tokens of session %q: %w", session, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("save the tokens of session %q: %w", session, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save the tokens of session %q: %w", session, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("save the tokens of session %q: %w", session, err)
	}
	done = true
	return nil
}

// mkdirAll makes dir and its missing parents with mode 0700 (umask aside),
// and sets the mode of the session directory itself, which holds only
// tokens.
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// Delete removes the session's tokens; it does nothing when none are stored.
func (s *Store) Delete(session string) error {
	p, err := s.Path(session)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete the tokens of session %q: %w", session, err)
	}
	return nil
}

// compactJSON is for error messages: a body on one line.
func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		return buf.String()
	}
	return strings.TrimSpace(string(b))
}

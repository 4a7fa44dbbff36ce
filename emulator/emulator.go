// Package emulator is the service, locally: the webhook API, signed
// run.status deliveries with retries and conversations, applications and
// runs, organizations, the single sign-on domain check and an identity
// provider for the PKCE sign-in. It follows docs/INTERFACE.md: the
// interface, and what devhook chose where it says nothing.
//
// An *Emulator is an http.Handler, so tests run it in httptest:
//
//	e, err := emulator.New(emulator.Config{APIKeys: []string{"key"}})
//	srv := httptest.NewServer(e)
//	defer e.Close()      // after srv.Close: stops deliveries and waits for them
//
// Every goroutine the emulator starts (a run's schedule, a delivery and its
// retries) belongs to it; Close cancels them and waits.
package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Defaults for Config's zero values.
const (
	DefaultAttemptTimeout = 10 * time.Second
	DefaultQueueTime      = 200 * time.Millisecond
	DefaultRunTime        = 500 * time.Millisecond
	DefaultMaxBodyBytes   = 1 << 20
	// DefaultMaxInputBytes bounds POST …/runs: the official clients send
	// inputs of up to 5 MiB inline, and larger ones through an upload.
	DefaultMaxInputBytes  = 8 << 20
	DefaultMaxUploadBytes = 64 << 20
	DefaultUploadTTL      = time.Hour
	// DefaultRunTimeout is the time limit of a run that executes a pushed
	// application.
	DefaultRunTimeout = 5 * time.Minute
	// DefaultMaxPackageBytes bounds a pushed package (the gzip'd tar);
	// DefaultMaxUnpackedBytes what it unpacks to.
	DefaultMaxPackageBytes  = 256 << 20
	DefaultMaxUnpackedBytes = 1 << 30
	// DefaultMaxPushedBytes bounds every pushed package together, with
	// the runs' working copies and the uploads in progress (packages.go).
	DefaultMaxPushedBytes = 2 << 30
	// DefaultMaxOutputBytes bounds what an executed run prints on standard
	// output: beyond it the run is killed and fails.
	DefaultMaxOutputBytes = 16 << 20
	// DefaultMaxLogBytes is how much of an executed run's standard error
	// is kept: its end.
	DefaultMaxLogBytes = 1 << 20
	DefaultTokenTTL    = time.Hour
	DefaultRefreshTTL  = 30 * 24 * time.Hour
	DefaultCodeTTL     = 5 * time.Minute
	DefaultUserEmail   = "developer@devhook.test"
	// MaxResponseBody is how much of a receiver's answer a conversation keeps.
	MaxResponseBody = 64 << 10
	// UserAgent is the User-Agent of deliveries.
	UserAgent = "service-webhooks/1"
)

// DefaultRetryDelays returns the waits before the second, third and fourth
// attempt of a failed delivery (a new slice each call).
func DefaultRetryDelays() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 25 * time.Second}
}

// Team is an organization record, as GET /v1/internal/me/organization
// returns it. Its ID is what callers put in the service-account header.
type Team struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Role          string `json:"role"`
	PendingInvite bool   `json:"pending_invite"`
}

// DefaultTeam returns the one team of the signed-in user when Config.Teams
// is nil. Its id is fixed so that state kept with --data survives restarts.
func DefaultTeam() Team {
	return Team{
		ID:   uuid.NewSHA1(uuid.NameSpaceURL, []byte("devhook-emulator-team")).String(),
		Name: "Devhook Team", Role: "admin",
	}
}

// Config configures an Emulator. Zero values mean defaults.
type Config struct {
	// APIKeys are the accepted API keys; each has its own account. When
	// empty, New generates one (see Emulator.APIKeys).
	APIKeys []string
	// Teams are the signed-in user's organizations; nil means the one team
	// DefaultTeam returns.
	// Any credential may act for a team with the service-account header.
	Teams []Team
	// SSODomains maps an e-mail domain to its domain_identifier; nil means
	// {"sso.devhook.test": "devhook-sso"}.
	SSODomains map[string]string
	// UserEmail is the signed-in user's e-mail; default DefaultUserEmail.
	// A sign-in through an identity_provider that is one of SSODomains'
	// identifiers signs in a user of that domain.
	UserEmail string

	Now            func() time.Time // nil = time.Now
	Rand           io.Reader        // secrets, codes and tokens; nil = crypto/rand
	RetryDelays    []time.Duration  // nil = DefaultRetryDelays(); empty non-nil = no retries
	AttemptTimeout time.Duration    // per delivery attempt; 0 = DefaultAttemptTimeout
	QueueTime      time.Duration    // run created → running; 0 = DefaultQueueTime
	RunTime        time.Duration    // running → succeeded; 0 = DefaultRunTime
	// Client sends deliveries; nil means a client that does not follow
	// redirects. AttemptTimeout applies either way.
	Client       *http.Client
	MaxBodyBytes int64 // request body limit; 0 = DefaultMaxBodyBytes
	// MaxInputBytes is the body limit of POST …/runs, whose input comes
	// inline; 0 = DefaultMaxInputBytes.
	MaxInputBytes int64
	// MaxUploadBytes is the largest input PUT to an upload URL; 0 =
	// DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// UploadTTL is how long an upload URL and its input wait for their
	// run; 0 = DefaultUploadTTL.
	UploadTTL time.Duration

	// RunTimeout is the time limit of a run that executes a pushed
	// application; 0 = DefaultRunTimeout.
	RunTimeout time.Duration
	// MaxPackageBytes bounds a pushed package and MaxUnpackedBytes what it
	// unpacks to; 0 = the defaults.
	MaxPackageBytes  int64
	MaxUnpackedBytes int64
	// MaxPushedBytes bounds all pushed packages together, unpacked, with
	// the working copies of the runs executing them and the uploads being
	// received; 0 = DefaultMaxPushedBytes. Packages nothing uses go first
	// when room is needed; past it an upload is refused with 413.
	MaxPushedBytes int64
	// MaxOutputBytes bounds an executed run's standard output, MaxLogBytes
	// how much of its standard error is kept; 0 = the defaults.
	MaxOutputBytes int64
	MaxLogBytes    int64
	// MaxParallelRuns bounds the runs of pushed applications executing at
	// once; more stay queued until one ends. 0 = the number of CPUs, at
	// least 2.
	MaxParallelRuns int
	// Logf hears what the emulator has to say that no answer carries: a
	// delivery given up after its retries, a state write that keeps
	// failing, a run's process that will not die. nil means nowhere.
	Logf func(format string, args ...any)

	// Python and Java are the commands that run python and java
	// applications; empty means python3 and java, found on PATH.
	Python, Java string

	// DataDir keeps the state in a bbolt file (emulator.db) in this
	// directory, across restarts, and pushed packages under pushed/.
	// Empty means in memory, and packages in a temporary directory.
	DataDir string

	// BaseURL is the address the emulator is reachable at, for the identity
	// provider's discovery document and console URLs. Empty means derived
	// from each request's Host (https when the request came over TLS).
	BaseURL string
	// ClientID, when set, is the only OAuth client id accepted.
	ClientID   string
	TokenTTL   time.Duration // access and id tokens; 0 = DefaultTokenTTL
	RefreshTTL time.Duration // refresh tokens; 0 = DefaultRefreshTTL
	CodeTTL    time.Duration // authorization codes; 0 = DefaultCodeTTL
	// NoRotateRefresh keeps a refresh token good for every refresh until it
	// expires, and a refresh answer then carries no refresh_token: the
	// client keeps the one it has. The zero value rotates: each refresh
	// token is good once and each refresh answer brings a new one.
	NoRotateRefresh bool
}

// Emulator is the service. It implements http.Handler.
type Emulator struct {
	cfg     Config
	keys    map[string]string // API key → account
	teams   map[string]bool
	handler http.Handler
	// transport is the delivery client's own, when New made the client;
	// Close closes its idle connections.
	transport *http.Transport

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // guards st, codes, sessions, closed and every write to db
	st       *state
	codes    map[string]*authCode     // authorization code → what it was issued for
	sessions map[string]identity      // identity provider browser session → who
	wake     map[string]chan struct{} // run key → its schedule, woken by a cancel
	db       *boltStore               // nil in memory
	closed   bool
	// logs are the standard error of the runs executing now, by run key,
	// so that GET …/logs shows them while they run. Guarded by mu.
	logs map[string]*tailBuffer
	pkgs *packageStore
	// slots holds one token per run of a pushed application executing.
	slots chan struct{}
	// pkgWake wakes the sweep of packages never activated (push.go).
	pkgWake chan struct{}
	// convWrites counts the conversations that could not be saved;
	// guarded by mu.
	convWrites failures
}

// New validates cfg, opens the data directory when one is given, resumes
// runs that were not finished, and returns the emulator.
func New(cfg Config) (*Emulator, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.RetryDelays == nil {
		cfg.RetryDelays = DefaultRetryDelays()
	}
	for _, d := range cfg.RetryDelays {
		if d < 0 {
			return nil, fmt.Errorf("emulator: retry delay %s is negative", d)
		}
	}
	setDefault(&cfg.AttemptTimeout, DefaultAttemptTimeout)
	setDefault(&cfg.QueueTime, DefaultQueueTime)
	setDefault(&cfg.RunTime, DefaultRunTime)
	setDefault(&cfg.TokenTTL, DefaultTokenTTL)
	setDefault(&cfg.RefreshTTL, DefaultRefreshTTL)
	setDefault(&cfg.CodeTTL, DefaultCodeTTL)
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxInputBytes <= 0 {
		cfg.MaxInputBytes = DefaultMaxInputBytes
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	setDefault(&cfg.UploadTTL, DefaultUploadTTL)
	setDefault(&cfg.RunTimeout, DefaultRunTimeout)
	setDefaultN(&cfg.MaxPackageBytes, DefaultMaxPackageBytes)
	setDefaultN(&cfg.MaxUnpackedBytes, DefaultMaxUnpackedBytes)
	setDefaultN(&cfg.MaxPushedBytes, DefaultMaxPushedBytes)
	setDefaultN(&cfg.MaxOutputBytes, DefaultMaxOutputBytes)
	setDefaultN(&cfg.MaxLogBytes, DefaultMaxLogBytes)
	if cfg.MaxParallelRuns <= 0 {
		cfg.MaxParallelRuns = max(2, runtime.NumCPU())
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Python == "" {
		cfg.Python = "python3"
	}
	if cfg.Java == "" {
		cfg.Java = "java"
	}
	var transport *http.Transport
	if cfg.Client == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
		cfg.Client = &http.Client{
			Transport:     transport,
			Timeout:       cfg.AttemptTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.Teams == nil {
		cfg.Teams = []Team{DefaultTeam()}
	}
	cfg.Teams = append([]Team(nil), cfg.Teams...) // the caller's slice and map stay theirs
	cfg.APIKeys = append([]string(nil), cfg.APIKeys...)
	if cfg.SSODomains == nil {
		cfg.SSODomains = map[string]string{"sso.devhook.test": "devhook-sso"}
	}
	sso := make(map[string]string, len(cfg.SSODomains))
	for d, id := range cfg.SSODomains {
		sso[d] = id
	}
	cfg.SSODomains = sso
	if cfg.UserEmail == "" {
		cfg.UserEmail = DefaultUserEmail
	}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("emulator: base URL %q must be an absolute http or https URL", cfg.BaseURL)
		}
		cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	}
	e := &Emulator{cfg: cfg, transport: transport, keys: map[string]string{}, teams: map[string]bool{}, st: newState(),
		codes: map[string]*authCode{}, sessions: map[string]identity{}, wake: map[string]chan struct{}{},
		logs: map[string]*tailBuffer{}, slots: make(chan struct{}, cfg.MaxParallelRuns), pkgWake: make(chan struct{}, 1)}
	e.convWrites = failures{what: "saving a delivery's conversation", logf: cfg.Logf}
	for _, k := range e.cfg.APIKeys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return nil, fmt.Errorf("emulator: API key %q must be non-empty and contain no white space", k)
		}
	}
	for _, t := range cfg.Teams {
		if t.ID == "" {
			return nil, errors.New("emulator: a team needs an id")
		}
		e.teams[t.ID] = true
	}
	if cfg.DataDir != "" {
		db, err := openBolt(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		if err := db.load(e.st); err != nil {
			db.close()
			return nil, err
		}
		e.db = db
	}
	if len(e.cfg.APIKeys) == 0 {
		if err := e.generateKey(); err != nil {
			if e.db != nil {
				e.db.close()
			}
			return nil, err
		}
	}
	for _, k := range e.cfg.APIKeys {
		sum := sha256.Sum256([]byte(k))
		e.keys[k] = "key-" + hex.EncodeToString(sum[:8])
	}
	pkgs, err := openPackages(cfg.DataDir, cfg.MaxPushedBytes, e.now)
	if err != nil {
		if e.db != nil {
			e.db.close()
		}
		return nil, err
	}
	pkgs.pinned = e.pinnedPackages
	e.pkgs = pkgs
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.handler = e.routes()
	e.startPackageSweep()
	e.resumeRuns()
	return e, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

func setDefaultN(n *int64, def int64) {
	if *n <= 0 {
		*n = def
	}
}

// generateKey makes the one API key of an emulator given none. With a
// data directory the key is kept there, so that its account's state stays
// reachable after a restart.
func (e *Emulator) generateKey() error {
	if e.db != nil {
		if k, err := e.db.generatedKey(); err != nil || k != "" {
			e.cfg.APIKeys = []string{k}
			return err
		}
	}
	k, err := e.random("key_", 24)
	if err != nil {
		return err
	}
	if e.db != nil {
		if err := e.db.setGeneratedKey(k); err != nil {
			return err
		}
	}
	e.cfg.APIKeys = []string{k}
	return nil
}

// APIKeys returns the accepted API keys, including a generated one.
func (e *Emulator) APIKeys() []string { return append([]string(nil), e.cfg.APIKeys...) }

// Teams returns the signed-in user's teams.
func (e *Emulator) Teams() []Team { return append([]Team(nil), e.cfg.Teams...) }

// ServeHTTP serves the service's API and identity provider.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.handler.ServeHTTP(w, r) }

// Close stops every run schedule and delivery, kills the process group of
// every executing run, waits for them, and closes the data file. Requests
// served after Close start no new work.
func (e *Emulator) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
	if e.transport != nil {
		e.transport.CloseIdleConnections()
	}
	err := e.pkgs.close()
	if e.db != nil {
		if cerr := e.db.close(); cerr != nil {
			err = cerr
		}
	}
	return err
}

// goroutine runs f as a goroutine the emulator owns, unless it is closed.
func (e *Emulator) goroutine(f func(ctx context.Context)) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f(e.ctx)
	}()
	return true
}

func (e *Emulator) now() time.Time { return e.cfg.Now().UTC() }

// random returns prefix followed by n random bytes in hex.
func (e *Emulator) random(prefix string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(e.cfg.Rand, b); err != nil {
		return "", fmt.Errorf("emulator: reading random bytes: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}

func (e *Emulator) newID() (string, error) {
	id, err := uuid.NewRandomFromReader(e.cfg.Rand)
	if err != nil {
		return "", fmt.Errorf("emulator: new id: %w", err)
	}
	return id.String(), nil
}

// Timestamp formats.
const (
	timeMillis  = "2006-01-02T15:04:05.000Z"    // webhooks, conversations
	timeSeconds = "2006-01-02T15:04:05Z"        // run.status created_at
	timeMicros  = "2006-01-02T15:04:05.000000Z" // applications and runs
)

// apiError is an answer {"error": msg} with a status.
type apiError struct {
	status int
	msg    string
	err    error // what errorf formatted, its %w operands in its chain
}

func (e *apiError) Error() string { return e.msg }

// Unwrap keeps the chain of an error errorf formatted with %w.
func (e *apiError) Unwrap() error { return e.err }

// errorf is an answer of status whose message is the format's; an error
// formatted with %w stays in its chain.
func errorf(status int, format string, args ...any) *apiError {
	err := fmt.Errorf(format, args...)
	return &apiError{status: status, msg: err.Error(), err: err}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encoding the answer failed"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, msg: "internal error: " + err.Error()}
	}
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="service"`)
	}
	writeJSON(w, ae.status, map[string]string{"error": ae.msg})
}

// decodeBody reads a JSON body of at most MaxBodyBytes into v: 413 when
// larger, 400 when it is not one JSON value of v's shape.
func (e *Emulator) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return e.decodeBodyN(w, r, v, e.cfg.MaxBodyBytes)
}

// decodeBodyN is decodeBody with a body limit of its own.
func (e *Emulator) decodeBodyN(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	b, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	return decodeJSON(b, v)
}

// readBody reads a request body of at most limit bytes: 413 when it is larger.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, errorf(http.StatusBadRequest, "reading request body: %w", err)
	}
	return b, nil
}

func tooLarge(limit int64) error {
	return errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", limit)
}

// decodeJSON reads one JSON value from b into v: 400 when it cannot.
func decodeJSON(b []byte, v any) error {
	if len(strings.TrimSpace(string(b))) == 0 {
		return errorf(http.StatusBadRequest, "request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "%s", jsonError(err))
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "request body has data after the JSON value")
	}
	return nil
}

// jsonError says what is wrong with a request body that did not decode,
// in JSON's terms: the field, the JSON type it must have and the one it
// has; never Go's type names.
func jsonError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		got := te.Value
		switch {
		case strings.HasPrefix(got, "number "):
			got = "the number " + strings.TrimPrefix(got, "number ")
		case got == "array" || got == "object":
			got = "an " + got
		case got == "bool":
			got = "a boolean"
		default:
			got = "a " + got
		}
		if te.Field == "" {
			return fmt.Sprintf("request body must be %s, not %s", jsonKind(te.Type), got)
		}
		return fmt.Sprintf("field %s must be %s, not %s", te.Field, jsonKind(te.Type), got)
	case errors.As(err, &se):
		return fmt.Sprintf("request body is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "request body is not valid JSON: it ends before the value does"
	}
	return "request body is not valid JSON: " + err.Error()
}

// jsonKind names the JSON type that decodes into t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another JSON type"
}

// baseURL is the configured base URL or the one the request came to.
func (e *Emulator) baseURL(r *http.Request) string {
	if e.cfg.BaseURL != "" {
		return e.cfg.BaseURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

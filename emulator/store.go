package emulator

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// state is everything the emulator knows. It lives in memory, guarded by
// Emulator.mu; with a data directory every change is also written through
// to bbolt, and New loads it back.
type state struct {
	seq      int64
	webhooks map[string]*webhook      // whKey(account, id)
	convs    map[string]*conversation // convKey(account, webhook, id)
	apps     map[string]*application  // acctKey(account, id)
	runs     map[string]*run          // acctKey(account, id)
	tokens   map[string]*token        // tokenKey(token)
	uploads  map[string]*upload       // acctKey(account, id)
	// pkgUploads are the upload URLs of packages, by their token's hash.
	pkgUploads map[string]*packageUpload
	// downloads are the download URLs of outputs and inputs, by their
	// token's hash.
	downloads map[string]*download
	// uploadTokens maps the hash of an upload URL's token to its key in
	// uploads; it is not stored, New rebuilds it.
	uploadTokens map[string]string
}

func newState() *state {
	return &state{
		webhooks: map[string]*webhook{}, convs: map[string]*conversation{},
		apps: map[string]*application{}, runs: map[string]*run{}, tokens: map[string]*token{},
		uploads: map[string]*upload{}, uploadTokens: map[string]string{}, pkgUploads: map[string]*packageUpload{},
		downloads: map[string]*download{},
	}
}

// Account ids never contain a NUL; client-chosen ids are hex-encoded in
// keys so that no id can make two keys collide.
func acctKey(account, id string) string { return account + "\x00" + hex.EncodeToString([]byte(id)) }
func whKey(account, id string) string   { return acctKey(account, id) }
func convKey(account, webhookID, id string) string {
	return acctKey(account, webhookID) + "\x00" + id
}

type webhook struct {
	Account     string    `json:"account"`
	Seq         int64     `json:"seq"`
	ID          string    `json:"id"`
	EventTypes  []string  `json:"event_types"`
	EndpointURL string    `json:"endpoint_url"`
	Description string    `json:"description"`
	Secret      string    `json:"secret"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

type conversation struct {
	Account      string          `json:"account"`
	WebhookID    string          `json:"webhook_id"`
	Seq          int64           `json:"seq"`
	ID           string          `json:"id"`
	CreatedAt    time.Time       `json:"created_at"`
	HTTPStatus   int             `json:"http_status"`
	DurationMS   int64           `json:"response_duration"`
	Error        *string         `json:"error"`
	Status       string          `json:"status"`
	EndpointURL  string          `json:"endpoint_url"`
	RequestBody  json.RawMessage `json:"request_body"`
	ResponseBody string          `json:"response_body"`
}

type application struct {
	Account     string    `json:"account"`
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Package is the newest package PUT to an upload URL of the
	// application; Binary the one assigned to the instance latest.
	Package *packageInfo `json:"package,omitempty"`
	Binary  *binary      `json:"binary,omitempty"`
}

type run struct {
	Account     string            `json:"account"`
	ID          string            `json:"id"`
	AppID       string            `json:"application_id"`
	InstanceID  string            `json:"instance_id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	UserEmail   string            `json:"user_email"`
	ConsoleURL  string            `json:"console_url"`
	Input       json.RawMessage   `json:"input"`
	Text        bool              `json:"text,omitempty"`        // an uploaded text input, as a JSON string
	InputBytes  int64             `json:"input_bytes,omitempty"` // the input's size when not len(Input)
	Options     map[string]string `json:"options"`
	Status      string            `json:"status_v2"`
	CreatedAt   time.Time         `json:"created_at"`
	InitiatedAt time.Time         `json:"initiated_at"`
	FinishedAt  time.Time         `json:"finished_at"`
	// Binary is the pushed executable the run executes, fixed when the
	// run starts; nil for the emulated execution that copies the input.
	Binary *binary `json:"binary,omitempty"`
	// Output is what an executed run printed (JSON), once it succeeded.
	Output json.RawMessage `json:"output,omitempty"`
	// Logs is what an executed run wrote to standard error (its end, when
	// longer than MaxLogBytes); Error the error of a failed run.
	Logs  string `json:"logs,omitempty"`
	Error string `json:"error,omitempty"`
	// Seq orders runs created in the same instant in a list; 0 in the runs
	// an emulator before it stored, which CreatedAt and ID order.
	Seq int64 `json:"seq,omitempty"`
}

// token is an access, id or refresh token the identity provider issued.
// Only its hash is a key.
type token struct {
	Kind      string    `json:"kind"` // access, id or refresh
	Subject   string    `json:"sub"`
	Email     string    `json:"email"`
	ClientID  string    `json:"client_id"`
	Provider  string    `json:"identity_provider,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	Used      bool      `json:"used,omitempty"` // a refresh token that was exchanged
}

// Bucket names.
const (
	bucketWebhooks = "webhooks"
	bucketConvs    = "conversations"
	bucketApps     = "applications"
	bucketRuns     = "runs"
	bucketTokens   = "tokens"
	bucketUploads  = "uploads"
	// bucketPackageUploads holds packageUploads by their token's hash.
	bucketPackageUploads = "package_uploads"
	bucketDownloads      = "downloads"
	bucketMeta           = "meta"
)

// buckets returns the buckets of the emulator's file.
func buckets() []string {
	return []string{bucketWebhooks, bucketConvs, bucketApps, bucketRuns, bucketTokens, bucketUploads, bucketPackageUploads, bucketDownloads, bucketMeta}
}

type boltStore struct{ db *bolt.DB }

func openBolt(dir string) (*boltStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("emulator: creating data directory: %w", err)
	}
	path := filepath.Join(dir, "emulator.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("emulator: opening %s (is another emulator using it?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets() {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("emulator: preparing %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) close() error { return s.db.Close() }

const metaGeneratedKey = "generated_api_key"

// generatedKey returns the API key an earlier start generated, or "".
func (s *boltStore) generatedKey() (string, error) {
	var k string
	err := s.db.View(func(tx *bolt.Tx) error {
		k = string(tx.Bucket([]byte(bucketMeta)).Get([]byte(metaGeneratedKey)))
		return nil
	})
	return k, err
}

func (s *boltStore) setGeneratedKey(k string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(bucketMeta)).Put([]byte(metaGeneratedKey), []byte(k))
	})
	if err != nil {
		return fmt.Errorf("emulator: saving the generated API key: %w", err)
	}
	return nil
}

func (s *boltStore) load(st *state) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(bucketMeta)).Get([]byte("seq")); v != nil {
			if err := json.Unmarshal(v, &st.seq); err != nil {
				return fmt.Errorf("meta seq: %w", err)
			}
		}
		each := func(bucket string, f func(k string, v []byte) error) error {
			return tx.Bucket([]byte(bucket)).ForEach(func(k, v []byte) error {
				if err := f(string(k), v); err != nil {
					return fmt.Errorf("%s %q: %w", bucket, k, err)
				}
				return nil
			})
		}
		return firstErr(
			each(bucketWebhooks, func(k string, v []byte) error { return loadInto(st.webhooks, k, v) }),
			each(bucketConvs, func(k string, v []byte) error { return loadInto(st.convs, k, v) }),
			each(bucketApps, func(k string, v []byte) error { return loadInto(st.apps, k, v) }),
			each(bucketRuns, func(k string, v []byte) error { return loadInto(st.runs, k, v) }),
			each(bucketTokens, func(k string, v []byte) error { return loadInto(st.tokens, k, v) }),
			each(bucketUploads, func(k string, v []byte) error { return loadInto(st.uploads, k, v) }),
			each(bucketPackageUploads, func(k string, v []byte) error { return loadInto(st.pkgUploads, k, v) }),
			each(bucketDownloads, func(k string, v []byte) error { return loadInto(st.downloads, k, v) }),
		)
	})
	if err != nil {
		return fmt.Errorf("emulator: loading state: %w", err)
	}
	for k, u := range st.uploads {
		st.uploadTokens[u.TokenHash] = k
	}
	return nil
}

func loadInto[T any](m map[string]*T, k string, v []byte) error {
	r := new(T)
	if err := json.Unmarshal(v, r); err != nil {
		return err
	}
	m[k] = r
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// op is one change to write through.
type op struct {
	bucket, key string
	value       any // nil deletes
}

func (s *boltStore) apply(seq int64, ops []op) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, _ := json.Marshal(seq)
		if err := tx.Bucket([]byte(bucketMeta)).Put([]byte("seq"), b); err != nil {
			return err
		}
		for _, o := range ops {
			bk := tx.Bucket([]byte(o.bucket))
			if o.value == nil {
				if err := bk.Delete([]byte(o.key)); err != nil {
					return err
				}
				continue
			}
			v, err := json.Marshal(o.value)
			if err != nil {
				return err
			}
			if err := bk.Put([]byte(o.key), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// persist writes ops through to the data file. The caller holds e.mu and
// has already changed e.st.
func (e *Emulator) persist(ops ...op) error {
	if e.db == nil {
		return nil
	}
	if err := e.db.apply(e.st.seq, ops); err != nil {
		return fmt.Errorf("emulator: saving state: %w", err)
	}
	return nil
}

func (e *Emulator) nextSeq() int64 {
	e.st.seq++
	return e.st.seq
}

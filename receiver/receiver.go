// Package receiver is the reference webhook receiver: it checks the
// service-signature of each request and answers exactly as the service's
// interface says a receiver does (401/500 with the plain-text bodies of its
// Errors table, 200 with a short JSON on success).
package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// MaxBody bounds the body the receiver reads.
const MaxBody = 10 << 20

// Config configures the receiver. Zero values mean defaults.
type Config struct {
	Secret string        // empty: every signed request gets 500, as the reference does
	Skew   time.Duration // default signature.DefaultSkew
	Now    func() time.Time
	// OnRequest is called for each request with its body and verdict.
	OnRequest func(r *http.Request, body []byte, v devhook.Verdict)
}

// New returns the reference receiver's handler.
func New(cfg Config) http.Handler {
	v := signature.Verifier{Skew: cfg.Skew, Now: cfg.Now}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			http.Error(w, "Bad Request: "+err.Error(), http.StatusBadRequest)
			return
		}
		verdict := v.Verify(cfg.Secret, r.Header.Get(devhook.SignatureHeader), body)
		if cfg.OnRequest != nil {
			cfg.OnRequest(r, body, verdict)
		}
		if !verdict.OK() {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(verdict.Status)
			io.WriteString(w, verdict.Text)
			return
		}
		ev := devhook.ParseEvent(body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"received": true, "event_type": ev.Type, "run_id": ev.RunID, "status_v2": ev.StatusV2,
		})
	})
}

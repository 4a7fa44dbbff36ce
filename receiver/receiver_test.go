package receiver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// The receiver answers exactly as the interface's Errors table says.
func TestReferenceAnswers(t *testing.T) {
	const secret = "whsec_r"
	now := time.UnixMilli(1_800_000_000_000)
	body := `{"event_type":"run.status","data":{"run_id":"r9","status_v2":"running"}}`
	sig := func(at time.Time, key string) string { return signature.Sign(key, at, []byte(body)) }
	tests := []struct {
		name, secret, header string
		status               int
		text                 string
	}{
		{"accepted", secret, sig(now, secret), 200, ""},
		{"missing", secret, "", 401, "Unauthorized: Missing Signature"},
		{"format", secret, "t=1", 401, "Unauthorized: Invalid Signature Format"},
		{"old", secret, sig(now.Add(-5*time.Minute), secret), 401, "Unauthorized: Invalid Time Value"},
		{"wrong", secret, sig(now, "other"), 401, "Unauthorized: Invalid signature"},
		{"no secret", "", sig(now, secret), 500, "Internal Server Error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen devhook.Verdict
			h := receiver.New(receiver.Config{Secret: tt.secret, Now: func() time.Time { return now },
				OnRequest: func(_ *http.Request, _ []byte, v devhook.Verdict) { seen = v }})
			srv := httptest.NewServer(h)
			defer srv.Close()
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
			if tt.header != "" {
				req.Header.Set(devhook.SignatureHeader, tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || seen.Status != tt.status {
				t.Fatalf("status %d (verdict %d), want %d", resp.StatusCode, seen.Status, tt.status)
			}
			if tt.status != 200 {
				if string(b) != tt.text || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
					t.Fatalf("body %q (%s), want %q", b, resp.Header.Get("Content-Type"), tt.text)
				}
				return
			}
			var ok map[string]any
			if err := json.Unmarshal(b, &ok); err != nil || ok["received"] != true || ok["run_id"] != "r9" {
				t.Fatalf("success body %s", b)
			}
		})
	}
}

package agent_test

// A receiver's answer that the sender gets cut (over MaxResponse, or the
// receiver stopped sending it) says so: Devhook-Answer-Cut on what the
// sender gets, its status the receiver's, and the record and the result
// say the sender got it cut.

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
)

func TestCutAnswerSaysSo(t *testing.T) {
	big := bytes.Repeat([]byte("a"), 5000)
	rec, srv := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			w.Write(big)
		case "/stops":
			// A Content-Length of 5000, 100 bytes, and the connection closed.
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nContent-Type: text/plain\r\n\r\n")
			brw.Write(big[:100])
			brw.Flush()
		default:
			w.Write([]byte("small"))
		}
	}
	for _, client := range []string{"own", "net/http"} {
		t.Run(client, func(t *testing.T) {
			tn := newTunnel(t, srv.URL, func(c *agent.Config) {
				c.MaxResponse = 1000
				if client == "net/http" {
					c.Client = agent.NewClient(4, nil)
				}
			})
			tn.startAgent()
			for i, tt := range []struct {
				path string
				want int    // bytes the sender gets
				note string // in the attempt's error
			}{
				{"/small", 5, ""},
				{"/big", 1000, "the receiver's answer is over 1000 bytes; the rest was dropped; the sender got its first 1000 bytes, marked Devhook-Answer-Cut"},
				{"/stops", 100, "; the sender got its first 100 bytes, marked Devhook-Answer-Cut"},
			} {
				resp, body := tn.post(tt.path, []byte(`{}`), nil)
				cut := resp.Header.Get(devhook.AnswerCutHeader)
				if resp.StatusCode != http.StatusOK || len(body) != tt.want {
					t.Fatalf("%s: sender got %s with %d bytes, want the receiver's 200 with %d", tt.path, resp.Status, len(body), tt.want)
				}
				if wantCut := map[bool]string{true: strconv.Itoa(tt.want)}[tt.note != ""]; cut != wantCut {
					t.Errorf("%s: %s %q, want %q", tt.path, devhook.AnswerCutHeader, cut, wantCut)
				}
				tn.waitResults(i + 1)
				r := tn.resultsCopy()[i]
				d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
				if err != nil || len(d.Attempts) != 1 {
					t.Fatalf("%s: recorded %v %+v", tt.path, err, d)
				}
				for _, at := range []*devhook.Attempt{r.Attempt, &d.Attempts[0]} {
					if tt.note == "" && at.Error != "" || !strings.Contains(at.Error, tt.note) || len(at.Body) != tt.want {
						t.Errorf("%s: attempt %d %d bytes %q; want %q", tt.path, at.Status, len(at.Body), at.Error, tt.note)
					}
				}
			}
		})
	}
}

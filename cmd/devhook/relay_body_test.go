package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// --body-stall cuts a sender silent for that long with 408, long before
// --body-timeout; --body-stall 0 and --body-min-rate 0 turn both bounds
// off, and the body timeout is what cuts it.
func TestRelay_BodyStallFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		why  string
	}{
		{"--body-stall 1s", []string{"--body-stall", "1s", "--body-timeout", "2m"}, "no byte of the body arrived for 1s"},
		{"both off", []string{"--body-stall", "0", "--body-min-rate", "0", "--body-timeout", "12s"}, "did not arrive within 12s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, relayURL := relayProc(t, tc.args...)
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(relayURL+"/v1/channels", "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			var cr struct {
				PublicURL string `json:"public_url"`
			}
			err = json.NewDecoder(resp.Body).Decode(&cr)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("open a channel: %s %v", resp.Status, err)
			}
			public, _ := url.Parse(cr.PublicURL)
			c, err := net.Dial("tcp", public.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			fmt.Fprintf(c, "POST %s/hook HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\nthe start", public.Path, public.Host)
			resp, err = http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("a stalled sender: no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), tc.why) {
				t.Fatalf("a stalled sender got %s %q, want 408 %q", resp.Status, b, tc.why)
			}
		})
	}
}

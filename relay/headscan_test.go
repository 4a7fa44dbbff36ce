package relay_test

import (
	"testing"

	"github.com/devhook/devhook/relay"
)

// A header that arrives a byte at a time is judged as one that comes
// whole: the scan resumes where it stopped (a long line trickled in is
// not searched again from its start at each arrival).
func TestScanHead_InPieces(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		done       bool
		bad        bool
		status     string
	}{
		{"plain", "POST /c/x/h HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi", true, false, ""},
		{"CL and TE", "POST /c/x/h HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", true, false, "400 Bad Request"},
		{"bare LF", "POST /c/x/h HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n", false, true, ""},
		{"obs-fold", "POST /c/x/h HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", false, true, ""},
		{"long line", "POST /c/x/h HTTP/1.1\r\nX-Long: " + string(make([]byte, 5000)) + "\r\n\r\n", true, false, ""},
		{"not ended", "POST /c/x/h HTTP/1.1\r\nHost: a\r\n", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, bad, status, end := relay.ScanHead([]byte(tc.head), len(tc.head))
			for _, step := range []int{1, 2, 7} {
				d, b, s, e := relay.ScanHead([]byte(tc.head), step)
				if d != done || b != bad || s != status || e != end {
					t.Errorf("in pieces of %d: %v %q %q at %d; whole: %v %q %q at %d", step, d, b, s, e, done, bad, status, end)
				}
			}
			if done != tc.done || (bad != "") != tc.bad || status != tc.status {
				t.Errorf("whole: done %v bad %q status %q", done, bad, status)
			}
		})
	}
}

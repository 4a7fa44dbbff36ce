package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
)

// A relay of this version refuses a delivery path with dot segments; an
// older relay, or another instance of a cluster, may still pass one. The
// agent's forward never leaves --forward's path whatever the relay
// passes: here the deliveries come from the relay's queue, as an older
// relay would have queued them.
func TestTunnelDotSegmentsStayUnderTheForwardPath(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL+"/base", nil)
	paths := []string{
		"/x/../../../escape",
		"/%2e%2e/%2e%2e/escape",
		"/x%2f..%2f..%2fescape",
		`/x\..\..\escape`,
		"/%252e%252e/escape",
	}
	for i, p := range paths {
		id, err := uuid.NewV7()
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		d := &devhook.Delivery{
			ID: id.String(), Channel: tn.creds.Channel, ReceivedAt: time.Now().UTC(), Method: http.MethodPost,
			Path: p, Header: signed(body), Body: body, Queued: true,
		}
		if err := tn.relayDB.Enqueue(tn.creds.Channel, d); err != nil {
			t.Fatal(err)
		}
	}
	tn.startAgent()
	got := rec.waitFor(t, len(paths))
	for _, g := range got {
		if g.RequestURI != "/base/escape" {
			t.Errorf("the receiver got %s %s, want /base/escape", g.Body, g.RequestURI)
		}
		if devhook.HasDotSegment(g.RequestURI) || !strings.HasPrefix(g.RequestURI, "/base/") {
			t.Errorf("a forward left /base: %s", g.RequestURI)
		}
	}
}

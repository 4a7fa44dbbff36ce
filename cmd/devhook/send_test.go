package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Issue 30: devhook send names who answered. A 502 that devhook listen
// made because the receiver could not be reached, or a 404 of the relay,
// is not "the receiver answered".
func TestSend_NamesWhoAnswered(t *testing.T) {
	const secret = "whsec_send_who"
	down := closedAddr(t)
	lr := startListen(t, "--forward", "http://"+down, "--secret", secret, "--data", t.TempDir())
	pub := lr.next(t, "ready")["public_url"].(string)

	_, _, err := devhookCmd(t, "send", pub+"/hook", "--secret", secret)
	if err == nil || !strings.Contains(err.Error(), "devhook listen answered 502 Bad Gateway, not the receiver: devhook: the local receiver did not answer") {
		t.Errorf("send with the receiver down: %v", err)
	}
	i := strings.LastIndex(pub, "/c/")
	_, _, err = devhookCmd(t, "send", pub[:i]+"/c/nosuchchannel/hook", "--secret", secret)
	if err == nil || !strings.Contains(err.Error(), "the devhook relay answered 404 Not Found, not the receiver: devhook relay: ") {
		t.Errorf("send to an unknown channel: %v", err)
	}

	// The receiver's own refusal is the receiver's.
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no thanks", http.StatusInternalServerError)
	}))
	defer recv.Close()
	_, _, err = devhookCmd(t, "send", recv.URL+"/hook", "--secret", secret)
	if err == nil || err.Error() != "the receiver answered 500 Internal Server Error" {
		t.Errorf("send to a receiver answering 500: %v", err)
	}
}

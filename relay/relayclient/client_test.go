package relayclient_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/devhook/devhook/relay/relayclient"
)

// TestOpen_AnswerCutSaysSo: a peer (a proxy, a relay dying) that cuts the
// connection in the middle of the answer to an open is an error of the
// connection, wrapping io.ErrUnexpectedEOF, not "unexpected answer" with
// the half of the credentials that arrived. A real listener writes the
// answer's status, headers and the start of its body, then closes.
func TestOpen_AnswerCutSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"channel\":\"06c4b8d2")
	}()
	t.Cleanup(func() { ln.Close(); <-done })

	_, err = relayclient.Open(context.Background(), http.DefaultClient, "http://"+ln.Addr().String(), "")
	if err == nil {
		t.Fatal("Open succeeded on an answer cut in its body")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Open's error = %q, want one wrapping io.ErrUnexpectedEOF (the connection was cut)", err)
	}
	if strings.Contains(err.Error(), "unexpected answer") {
		t.Errorf("Open's error = %q, calls a cut connection an unexpected answer", err)
	}
}

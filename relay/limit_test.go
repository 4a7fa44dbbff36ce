package relay_test

import (
	"net"
	"testing"
	"time"

	"github.com/devhook/devhook/relay"
)

// At most n connections are accepted at once; closing one lets the next in.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := relay.LimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	select {
	case c := <-accepted:
		t.Fatalf("a third connection was accepted while two were open: %v", c.RemoteAddr())
	case <-time.After(200 * time.Millisecond): // observing that nothing happens
	}
	first.Close()
	first.Close() // a second Close must not free a second slot
	var third net.Conn
	select {
	case third = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("closing a connection did not let the waiting one in")
	}
	select {
	case c := <-accepted:
		t.Fatalf("a closed connection freed two places: %v accepted", c.RemoteAddr())
	case <-time.After(200 * time.Millisecond):
	}
	third.Close()
	second.Close()
	ln.Close()
	for c := range accepted {
		c.Close()
	}
}

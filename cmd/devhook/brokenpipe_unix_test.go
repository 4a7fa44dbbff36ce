//go:build unix

package main

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An output that is no longer open at all (its descriptor closed under the
// watch: poll says POLLNVAL at once, every time) ends the watch rather
// than spinning on it; a pipe whose reader went is named.
func TestWatchFds_EndsOnEveryOutcome(t *testing.T) {
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	watch := func(output func() int) <-chan string {
		wakeR, _ := pipe() // before output: a descriptor it closes is not reused for it
		fd := output()
		fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(wakeR.Fd()), Events: unix.POLLIN}}
		got := make(chan string, 1)
		go func() { got <- watchFds(fds, []string{"standard output"}) }()
		return got
	}
	wait := func(got <-chan string, want, what string) {
		t.Helper()
		select {
		case name := <-got:
			if name != want {
				t.Errorf("%s: %q, want %q", what, name, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the watch did not end", what)
		}
	}

	r, w := pipe()
	got := watch(func() int { return int(w.Fd()) })
	r.Close()
	wait(got, "standard output", "a pipe whose reader went")

	// A descriptor number nothing has open: POLLNVAL.
	wait(watch(func() int {
		r, w := pipe()
		fd := int(w.Fd())
		r.Close()
		w.Close()
		return fd
	}), "", "an output no longer open")
}

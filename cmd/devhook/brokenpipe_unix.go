//go:build unix

package main

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// brokenOutput names the standard output or error that is a pipe (or a
// socket) nobody reads any more, or returns "": a SIGPIPE comes of a
// write to any broken pipe or socket, and only these two stop devhook.
// The write end of a pipe whose readers are gone polls POLLERR.
func brokenOutput() string {
	for _, o := range []struct {
		fd   int32
		name string
	}{{1, "standard output"}, {2, "standard error"}} {
		fds := []unix.PollFd{{Fd: o.fd, Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		for errors.Is(err, unix.EINTR) {
			n, err = unix.Poll(fds, 0)
		}
		if err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return o.name
		}
	}
	return ""
}

// watchClosedOutputs reports on closed the name of the standard output or
// error that is a pipe (or a socket) whose reader went, as soon as it goes,
// rather than at the next write: `devhook listen --json | head -1` would
// otherwise run on once head has exited, its shell waiting for it, until a
// delivery's line met the closed pipe. Outputs that are no pipe nor socket
// (a terminal, whose closing is SIGHUP; a file) are not watched. stop ends
// the watch and waits for it.
func watchClosedOutputs() (closed <-chan string, stop func()) {
	var fds []unix.PollFd
	var names []string
	for _, o := range []struct {
		fd   int
		name string
	}{{1, "standard output"}, {2, "standard error"}} {
		var st unix.Stat_t
		if unix.Fstat(o.fd, &st) != nil {
			continue
		}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFIFO || t == unix.S_IFSOCK {
			// No events asked: POLLERR (a pipe without readers) and
			// POLLHUP (a socket shut down) come all the same.
			fds = append(fds, unix.PollFd{Fd: int32(o.fd)})
			names = append(names, o.name)
		}
	}
	if len(fds) == 0 {
		return nil, func() {}
	}
	wakeR, wakeW, err := os.Pipe()
	if err != nil {
		return nil, func() {} // writes still find a closed output
	}
	fds = append(fds, unix.PollFd{Fd: int32(wakeR.Fd()), Events: unix.POLLIN})
	out := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if name := watchFds(fds, names); name != "" {
			out <- name
		}
	}()
	return out, func() {
		_ = wakeW.Close()
		<-done
		_ = wakeR.Close()
	}
}

// watchFds polls fds, the outputs names watches and then the wake pipe,
// until one of the outputs is closed (its name) or the wake pipe is, poll
// fails, or an output is no longer open at all ("" for those: writes still
// find a closed output). Each of those ends the watch: a revent that is
// none of them (POLLNVAL, an output closed under it) would otherwise come
// back at once from every poll, a loop without a pause.
func watchFds(fds []unix.PollFd, names []string) string {
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || fds[len(fds)-1].Revents != 0 {
			return "" // stopped, or poll cannot watch
		}
		for i, name := range names {
			switch r := fds[i].Revents; {
			case r&(unix.POLLERR|unix.POLLHUP) != 0:
				return name
			case r != 0:
				return ""
			}
		}
	}
}

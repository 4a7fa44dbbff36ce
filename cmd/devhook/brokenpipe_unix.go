//go:build unix

package main

import (
	"errors"

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

//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package agent

import (
	"net"
	"syscall"
)

// peekWorks: closedByPeer sees closed connections.
const peekWorks = true

// peeker tells whether a receiver closed an idle connection, with a
// non-blocking MSG_PEEK of one byte on the socket: one system call, no
// goroutine, and nothing consumed.
type peeker struct {
	rc   syscall.RawConn
	fn   func(fd uintptr) bool // made once per connection, to peek without allocating
	open bool
	buf  [1]byte
}

func (p *peeker) init(conn net.Conn) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.rc = rc
	p.fn = func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read is an open, idle connection. 0 bytes is
		// the receiver's FIN; a byte is an answer nobody asked for
		// (a 408 before closing, say); an error is a reset.
		p.open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR)
		return true // never wait for the socket to be readable
	}
}

// closed reports whether the connection is unusable: closed by the peer,
// reset, or with unread bytes. Without a socket to peek at (not a TCP
// connection), it says no.
func (p *peeker) closed() bool {
	if p.rc == nil {
		return false
	}
	p.open = false
	if err := p.rc.Read(p.fn); err != nil {
		return true
	}
	return !p.open
}

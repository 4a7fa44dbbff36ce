package agent

import (
	"time"

	"golang.org/x/sys/unix"
)

// uncheckedIdle is how long a connection may have been idle and be reused
// without closedByPeer's look at its socket, a system call: a receiver
// that drops idle connections does so after seconds (Node after 5 s), not
// within this. Here a request written whole on a connection the receiver
// had already dropped is found afterwards (requestUnacked) and sent again,
// so a receiver that drops them sooner costs a forward a second write,
// not its delivery.
const uncheckedIdle = time.Second

// requestUnacked reports whether the receiver's TCP acknowledged no byte
// of the request under way on c: Linux counts the bytes of a connection
// the peer acknowledged (tcpi_bytes_acked, the SYN being the first). It
// is asked after the receiver ended the connection with a FIN and no
// answer: a FIN acknowledges every byte its sender's TCP received before
// it, so a FIN that does not cover the request was sent before any of the
// request arrived, and the receiver's program, which can read only what
// its TCP received, read none of it. It reports false when it cannot tell.
func (c *hconn) requestUnacked() bool {
	if c.peek.rc == nil {
		return false
	}
	var info *unix.TCPInfo
	var err error
	if cerr := c.peek.rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); cerr != nil || err != nil {
		return false
	}
	return info.Bytes_acked <= uint64(1+c.sentBefore)
}

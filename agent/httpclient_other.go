//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package agent

import "net"

// peekWorks: closedByPeer sees closed connections.
const peekWorks = false

// peeker cannot look at the socket here without blocking or consuming:
// a receiver's close of an idle connection shows when the next request
// on it fails, and retryable sends that request again on a new one.
type peeker struct{}

func (p *peeker) init(net.Conn) {}

func (p *peeker) closed() bool { return false }

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package agent

import "net"

// peekWorks: closedByPeer sees closed connections.
const peekWorks = false

// peeker cannot look at the socket here without blocking or consuming, so
// a receiver's close of an idle connection would show only when a request
// written on it fails, too late to send it again: here, forwards go
// through net/http, which watches its idle connections (see Agent.send).
type peeker struct{}

func (p *peeker) init(net.Conn) {}

func (p *peeker) closed() bool { return false }

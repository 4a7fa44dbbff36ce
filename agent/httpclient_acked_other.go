//go:build !linux

package agent

// uncheckedIdle is how long a connection may have been idle and be reused
// without closedByPeer's look at its socket. Here a request written whole
// on a connection the receiver had dropped cannot be told from one the
// receiver read (requestUnacked), so every reuse is checked.
const uncheckedIdle = 0

// requestUnacked cannot tell here whether the receiver's TCP acknowledged
// the request under way: it says no, and the request is not sent again.
func (c *hconn) requestUnacked() bool { return false }

package testnet

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strconv"
)

// socksHandshake answers a SOCKS5 greeting, the credentials when the
// proxy wants them, and one CONNECT; it returns the connection to the
// target, or nil when refused.
func (p *Proxy) socksHandshake(c net.Conn, br *bufio.Reader) net.Conn {
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || head[0] != 5 {
		return nil
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return nil
	}
	want := byte(0) // no authentication
	if p.cfg.User != "" {
		want = 2 // username/password
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered {
		c.Write([]byte{5, 0xff})
		p.refusedAs("no acceptable method")
		return nil
	}
	c.Write([]byte{5, want})
	if want == 2 {
		user, pw, ok := readUserPass(br)
		if !ok || user != p.cfg.User || pw != p.cfg.Password {
			c.Write([]byte{1, 1})
			p.refusedAs("credentials")
			return nil
		}
		c.Write([]byte{1, 0})
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != 5 || req[1] != 1 {
		return nil
	}
	var host string
	switch req[3] {
	case 1, 4:
		ip := make(net.IP, map[byte]int{1: 4, 4: 16}[req[3]])
		if _, err := io.ReadFull(br, ip); err != nil {
			return nil
		}
		host = ip.String()
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return nil
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return nil
		}
		host = string(name)
	default:
		return nil
	}
	var port [2]byte
	if _, err := io.ReadFull(br, port[:]); err != nil {
		return nil
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:]))))
	up := p.dialTarget(target)
	if up == nil {
		c.Write([]byte{5, 4, 0, 1, 0, 0, 0, 0, 0, 0}) // host unreachable
		p.refusedAs("CONNECT " + target)
		return nil
	}
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		p.untrack(up)
		return nil
	}
	return up
}

func readUserPass(br *bufio.Reader) (user, pw string, ok bool) {
	ver, err := br.ReadByte()
	if err != nil || ver != 1 {
		return "", "", false
	}
	read := func() (string, bool) {
		n, err := br.ReadByte()
		if err != nil {
			return "", false
		}
		b := make([]byte, n)
		_, err = io.ReadFull(br, b)
		return string(b), err == nil
	}
	if user, ok = read(); !ok {
		return "", "", false
	}
	pw, ok = read()
	return user, pw, ok
}

func (p *Proxy) refusedAs(what string) {
	p.mu.Lock()
	p.refused = append(p.refused, "socks5 "+what)
	p.mu.Unlock()
}

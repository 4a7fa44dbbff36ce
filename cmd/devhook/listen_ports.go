package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/devhook/devhook/running"
)

// A second listen on this machine: before it binds anything, listen tries
// the ports it would take (the built-in relay's --relay-addr, the
// inspector's --inspect), and when one or both are taken it says so in one
// message: both ports, the devhook listen that holds them when it finds
// one (through the inspector on that port and the listen.json of its data
// directory, or of this one's, or of ~/.devhook), and the ways forward:
// sharing that listen's relay with --relay, or other ports.

// portInUse is a port listen needs that another program holds.
type portInUse struct {
	addr string // as given
	flag string // --relay-addr, --inspect
	what string // the built-in relay, the inspector
}

// portsInUseError is checkPorts' error. It wraps syscall.EADDRINUSE.
type portsInUseError struct{ msg string }

func (e *portsInUseError) Error() string { return e.msg }
func (e *portsInUseError) Unwrap() error { return syscall.EADDRINUSE }

// checkPorts fails, saying everything at once, when a port listen needs
// is taken. A port it cannot try for another reason (an address that is
// not this machine's) is left to the bind, which says so.
func (o *listenOptions) checkPorts(ctx context.Context) error {
	var taken []portInUse
	if o.relayURL == "" && addrInUse(o.relayAddr) {
		taken = append(taken, portInUse{o.relayAddr, "--relay-addr", "the built-in relay"})
	}
	if o.inspect != "off" && addrInUse(o.inspect) {
		taken = append(taken, portInUse{o.inspect, "--inspect", "the inspector"})
	}
	if len(taken) == 0 {
		return nil
	}
	other, found := o.otherListen(ctx, taken)
	return &portsInUseError{portsMessage(taken, other, found, absDir(o.dataDir))}
}

// addrInUse reports whether addr is taken: a listen on it fails with
// EADDRINUSE.
func addrInUse(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return false
	}
	return errors.Is(err, syscall.EADDRINUSE)
}

// otherListen finds the running listen that holds a taken port, or that
// records in this listen's data directory.
func (o *listenOptions) otherListen(ctx context.Context, taken []portInUse) (running.Listen, bool) {
	var candidates []running.Listen
	if l, err := running.Read(o.dataDir); err == nil {
		candidates = append(candidates, l)
	}
	for _, p := range taken {
		if p.flag != "--inspect" {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := inspectorClient("http://" + p.addr).Settings(ctx)
		cancel()
		if err != nil || s.Data == "" {
			continue
		}
		if l, err := running.Read(s.Data); err == nil {
			candidates = append(candidates, l)
		} else {
			candidates = append(candidates, running.Listen{Data: s.Data, InspectorURL: "http://" + p.addr, PublicURL: s.PublicURL, RelayURL: s.RelayURL})
		}
	}
	if home := defaultDataDir(); absDir(home) != absDir(o.dataDir) {
		if l, err := running.Read(home); err == nil {
			candidates = append(candidates, l)
		}
	}
	for _, l := range candidates {
		for _, p := range taken {
			if samePort(l.RelayURL, p.addr) && p.flag == "--relay-addr" || samePort(l.InspectorURL, p.addr) && p.flag == "--inspect" {
				return l, true
			}
		}
	}
	if len(candidates) > 0 && absDir(candidates[0].Data) == absDir(o.dataDir) {
		return candidates[0], true
	}
	return running.Listen{}, false
}

// samePort reports whether the URL u is served on the port of addr.
func samePort(u, addr string) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.Port() == "" {
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == pu.Port() && port != "0"
}

// portsMessage says which ports are taken, by which listen when one was
// found, and what to do.
func portsMessage(taken []portInUse, other running.Listen, found bool, data string) string {
	var names []string
	relayTaken, inspectTaken := false, false
	for _, p := range taken {
		names = append(names, fmt.Sprintf("%s (%s, %s)", p.addr, p.what, p.flag))
		relayTaken = relayTaken || p.flag == "--relay-addr"
		inspectTaken = inspectTaken || p.flag == "--inspect"
	}
	ports := strings.Join(names, " and ")
	var b strings.Builder
	if !found {
		verb := "is"
		if len(taken) > 1 {
			verb = "are"
		}
		fmt.Fprintf(&b, "%s %s in use by another program", ports, verb)
	} else {
		who := "a devhook listen (data " + other.Data + ")" // its pid not known (yet, or any more)
		if other.PID > 0 {
			who = fmt.Sprintf("devhook listen (pid %d, data %s)", other.PID, other.Data)
		}
		fmt.Fprintf(&b, "%s already runs here and holds %s", who, ports)
		if absDir(other.Data) == data {
			b.WriteString(", and records in this listen's data directory (--data)")
		}
		var where []string
		if other.PublicURL != "" {
			where = append(where, "its public URL is "+other.PublicURL)
		}
		if other.InspectorURL != "" {
			where = append(where, "its inspector "+other.InspectorURL)
		}
		if len(where) > 0 {
			b.WriteString("; " + strings.Join(where, ", "))
		}
	}
	if found {
		b.WriteString(".\nTo run this listen beside it:")
	} else {
		b.WriteString(".\nTo run this listen:")
	}
	free := "127.0.0.1:0"
	own := ""
	if found && absDir(other.Data) == data {
		own = " --data ANOTHER_DIR"
	}
	inspect := ""
	if inspectTaken {
		inspect = " --inspect " + free
	}
	// A built-in relay made public (--public-url) opens channels for its
	// own listen alone: not offered.
	public := found && other.PublicURL != "" && other.RelayURL != "" && !strings.HasPrefix(other.PublicURL, other.RelayURL+"/")
	if found && relayTaken && !public {
		relayURL := other.RelayURL
		if relayURL == "" {
			relayURL = "http://" + taken[0].addr
		}
		fmt.Fprintf(&b, "\n  share its relay:  --relay %s%s%s  (a channel of this listen's own on it; it stops when that listen does)", relayURL, inspect, own)
	}
	var flags []string
	if relayTaken {
		flags = append(flags, "--relay-addr "+free)
	}
	if inspectTaken {
		flags = append(flags, "--inspect "+free)
	}
	fmt.Fprintf(&b, "\n  other ports:      %s%s  (%s takes any free port; the ready line says which)", strings.Join(flags, " "), own, free)
	if inspectTaken && !relayTaken {
		b.WriteString("\n  or no inspector:  --inspect off")
	}
	return b.String()
}

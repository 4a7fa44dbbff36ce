package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// trace writes perf script lines for the calls of one delivery's way
// through relay (pid 2) and listen (pid 3), the bench being pid 1,
// starting at t0 µs, each stretch 10 µs and each call 1 µs, with noise:
// an eventfd write, a read that found nothing, listen's --json line, and
// the bench reading something else between the receiver's read and its
// answer.
func trace(b *bytes.Buffer, t0 float64) {
	at := t0
	call := func(pid, nr, fd, ret int) {
		fmt.Fprintf(b, "%d/%d %.6f: raw_syscalls:sys_enter: NR %d (%x, 7f0000, 6f6, 0, 0, 0)\n", pid, pid*10, at/1e6, nr, fd)
		fmt.Fprintf(b, "%d/%d %.6f:  raw_syscalls:sys_exit: NR %d = %d\n", pid, pid*10, (at+1)/1e6, nr, ret)
		at += 10
	}
	call(1, 1, 11, 1775) // the sender's request
	call(2, 0, 13, -11)  // EAGAIN: not a point
	call(2, 0, 13, 1775)
	call(2, 1, 7, 8) // a wake-up: not a point
	call(2, 1, 12, 1782)
	call(3, 0, 12, 1782)
	call(3, 1, 16, 1740)
	call(1, 0, 9, 860) // the bench reads listen's --json line: not the receiver's read
	call(1, 0, 21, 1740)
	call(1, 1, 21, 198)
	call(3, 1, 1, 860) // listen's --json line
	call(3, 0, 16, 198)
	call(3, 1, 12, 234)
	call(2, 0, 12, 234)
	call(2, 1, 13, 254)
	call(1, 0, 11, 254)
	fmt.Fprintf(b, "3/30 %.6f:     sched:sched_switch: prev_comm=dh prev_pid=30 prev_prio=120 prev_state=S ==> next_comm=swapper/0\n", at/1e6)
}

func TestHops(t *testing.T) {
	var in bytes.Buffer
	for i := range 5 {
		trace(&in, 1e6+float64(i)*1000)
	}
	var out bytes.Buffer
	if err := run([]string{"-pids", "bench=1,relay=2,listen=3", "-tunnel", "relay,listen"}, &in, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// A read's point is its return, a write's its entry (each call takes
	// 1 µs): 10 µs a stretch, one more from a write to a read, one less
	// from a read to a write, 10 more past each noise call.
	for _, want := range []string{
		"5 deliveries",
		"hop: sender to relay             21.0     21.0     21.0", // past the EAGAIN read
		"relay (request)                  19.0     19.0     19.0", // past the eventfd write
		"hop: relay to listen             11.0",
		"listen (request)                  9.0",
		"hop: listen to receiver          21.0", // past the bench's read of the --json line
		"receiver                          9.0",
		"hop: receiver to listen          21.0", // past listen's --json line
		"listen (answer)                   9.0",
		"hop: listen to relay             11.0",
		"relay (answer)                    9.0",
		"hop: relay to sender             11.0",
		"whole way                       151.0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
}

func TestHops_Errors(t *testing.T) {
	for _, c := range []struct {
		args []string
		in   string
		want string
	}{
		{[]string{"-pids", "bench"}, "", "is not role=pid"},
		{[]string{"-pids", "bench=1,relay=2,listen=3", "-tunnel", "relay"}, "", "give the two ends"},
		{[]string{"-pids", "bench=1,relay=2,listen=3"}, "1/10 1.000000: raw_syscalls:sys_enter: NR 1 (b, 0)\n", "no delivery's way found"},
	} {
		err := run(c.args, strings.NewReader(c.in), new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// Command hops splits a lone delivery's time (the load harness at
// concurrency 1) into its hops between processes and its stretches inside
// each, from a trace of the read and write system calls of the processes
// on its path.
//
// At concurrency 1 a delivery crosses four processes in turn: the
// sender's write, the tunnel's public side (the relay, or chisel's
// server), its other end (listen, or chisel's client), the receiver, and
// back. Each read of a delivery's bytes that returns them, and each write
// of them, is a point on its way; the time between one process's write and
// the next one's read is a hop (the kernel's loopback, waking the reader,
// its runtime's scheduler); the time between a process's read and its own
// write is its work. hops finds that sequence of twelve calls again and
// again in the trace and prints the median and quartiles of each stretch.
//
// How the figures in docs/PERFORMANCE.md were made, for each tunnel in
// turn, during a run of go run ./bench -c 1 (the bench process is sender
// and receiver):
//
//	perf record -p BENCH,RELAY,LISTEN -e raw_syscalls:sys_enter,raw_syscalls:sys_exit -o t.data -- sleep 0.3
//	perf script -i t.data -F pid,tid,time,event,trace | go run ./bench/hops -pids bench=BENCH,relay=RELAY,listen=LISTEN -tunnel relay,listen
//
// Calls of fewer than 100 bytes (wake-ups through eventfds), and writes of
// the tunnel's far end to its standard output (listen --json), are not
// points of the way.
package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// call is one read(2) or write(2) that moved at least minBytes.
type call struct {
	enter, exit float64 // µs
	role        string
	write       bool
	fd          int
	n           int
}

const minBytes = 100

// stretches names the eleven stretches of a delivery's way, between its
// twelve calls, for tunnel ends near (the public side) and far.
func stretches(near, far string) []string {
	return []string{
		"hop: sender to " + near, near + " (request)", "hop: " + near + " to " + far, far + " (request)",
		"hop: " + far + " to receiver", "receiver", "hop: receiver to " + far, far + " (answer)",
		"hop: " + far + " to " + near, near + " (answer)", "hop: " + near + " to sender",
	}
}

// way is the sequence of calls of one delivery: who, and whether it writes.
func way(near, far string) []struct {
	role  string
	write bool
} {
	const bench = "bench"
	return []struct {
		role  string
		write bool
	}{{bench, true}, {near, false}, {near, true}, {far, false}, {far, true}, {bench, false},
		{bench, true}, {far, false}, {far, true}, {near, false}, {near, true}, {bench, false}}
}

// parse reads perf script output (-F pid,tid,time,event,trace) and returns
// the calls of the processes named in pids (pid: role), in time order.
func parse(r io.Reader, pids map[int]string) ([]call, error) {
	type open struct {
		t     float64
		write bool
		fd    int
	}
	pending := map[int]open{}
	var calls []call
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// "  29323/29327  38257.687090: raw_syscalls:sys_exit: NR 0 = 1782"
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		pidTid := strings.SplitN(f[0], "/", 2)
		if len(pidTid) != 2 {
			continue
		}
		pid, err1 := strconv.Atoi(pidTid[0])
		tid, err2 := strconv.Atoi(pidTid[1])
		t, err3 := strconv.ParseFloat(strings.TrimSuffix(f[1], ":"), 64)
		role, ok := pids[pid]
		if err1 != nil || err2 != nil || err3 != nil || !ok || f[3] != "NR" {
			continue
		}
		t *= 1e6
		nr := f[4]
		switch f[2] {
		case "raw_syscalls:sys_enter:":
			if nr != "0" && nr != "1" || len(f) < 6 {
				delete(pending, tid)
				continue
			}
			fd, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(f[5], "("), ","), 16, 64)
			if err != nil {
				continue
			}
			pending[tid] = open{t: t, write: nr == "1", fd: int(fd)}
		case "raw_syscalls:sys_exit:":
			o, ok := pending[tid]
			delete(pending, tid)
			if !ok || len(f) < 7 || (nr != "0" && nr != "1") {
				continue
			}
			n, err := strconv.Atoi(f[6])
			if err != nil || n < minBytes {
				continue
			}
			calls = append(calls, call{enter: o.t, exit: t, role: role, write: o.write, fd: o.fd, n: n})
		}
	}
	slices.SortStableFunc(calls, func(a, b call) int { return cmp.Compare(a.enter, b.enter) })
	return calls, sc.Err()
}

// deliveries finds the deliveries' ways among calls, each the twelve calls
// of way in order (others in between are passed over), and returns the
// start of each call (its entry for a write, its return for a read: when
// the bytes left, when they arrived). The receiver's read and the sender's
// read must take the bytes the far end and the near end wrote.
func deliveries(calls []call, near, far string) [][]float64 {
	w := way(near, far)
	var out [][]float64
	var cur []call
	for _, c := range calls {
		if c.role == far && c.write && c.fd == 1 {
			continue // listen --json's line
		}
		i := len(cur)
		step := w[i]
		match := c.role == step.role && c.write == step.write
		if match && (i == 5 || i == 11) && c.n != cur[i-1].n {
			match = false
		}
		switch {
		case match:
			cur = append(cur, c)
			if len(cur) == len(w) {
				at := make([]float64, len(cur))
				for k, x := range cur {
					at[k] = x.enter
					if !x.write {
						at[k] = x.exit
					}
				}
				out = append(out, at)
				cur = cur[:0]
			}
		case c.role == w[0].role && c.write == w[0].write:
			cur = append(cur[:0], c)
		}
	}
	return out
}

// quartiles returns the 25th, 50th and 75th percentiles of v.
func quartiles(v []float64) (q1, med, q3 float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		return s[int(p*float64(len(s)-1)+0.5)]
	}
	return at(0.25), at(0.5), at(0.75)
}

func report(w io.Writer, ways [][]float64, near, far string) {
	names := stretches(near, far)
	fmt.Fprintf(w, "%d deliveries\n", len(ways))
	fmt.Fprintf(w, "%-28s %8s %8s %8s\n", "µs", "median", "p25", "p75")
	var totals []float64
	for _, at := range ways {
		totals = append(totals, at[len(at)-1]-at[0])
	}
	for k, name := range names {
		var d []float64
		for _, at := range ways {
			d = append(d, at[k+1]-at[k])
		}
		q1, med, q3 := quartiles(d)
		fmt.Fprintf(w, "%-28s %8.1f %8.1f %8.1f\n", name, med, q1, q3)
	}
	q1, med, q3 := quartiles(totals)
	fmt.Fprintf(w, "%-28s %8.1f %8.1f %8.1f\n", "whole way", med, q1, q3)
}

// parsePids reads role=pid,role=pid.
func parsePids(s string) (map[int]string, error) {
	m := map[int]string{}
	for _, kv := range strings.Split(s, ",") {
		role, p, ok := strings.Cut(kv, "=")
		pid, err := strconv.Atoi(p)
		if !ok || err != nil || role == "" {
			return nil, fmt.Errorf("-pids: %q is not role=pid", kv)
		}
		m[pid] = role
	}
	return m, nil
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("hops", flag.ContinueOnError)
	pidsFlag := fs.String("pids", "", "the processes, role=pid: bench (sender and receiver) and the tunnel's two ends, such as bench=1,relay=2,listen=3")
	tunnel := fs.String("tunnel", "relay,listen", "the tunnel's ends, its public side first: relay,listen (devhook) or server,client (chisel)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pids, err := parsePids(*pidsFlag)
	if err != nil {
		return err
	}
	near, far, ok := strings.Cut(*tunnel, ",")
	if !ok {
		return errors.New("-tunnel: give the two ends, such as relay,listen")
	}
	calls, err := parse(in, pids)
	if err != nil {
		return err
	}
	ways := deliveries(calls, near, far)
	if len(ways) == 0 {
		return errors.New("no delivery's way found: check -pids and -tunnel, and that the trace has raw_syscalls events")
	}
	report(out, ways, near, far)
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hops:", err)
		os.Exit(2)
	}
}

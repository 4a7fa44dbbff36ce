// Command perfclass says where a process's CPU goes, from the output of
// `perf script` (samples with call graphs, `perf record -g`): it puts
// each sample in a category and prints each category's share, and its
// µs per delivery when told the process's CPU per delivery.
//
// A sample whose stack holds a frame of the collector is GC's, whatever
// called it. Otherwise the frames are read from the leaf up, and the
// first that matches one of the role's categories decides; a sample none
// matches is the scheduler's and netpoll's when a frame of those is in
// it, else "other". So a write(2) is the category of the code that made
// it (the relay's answer: public side; a frame: WebSocket), and runtime
// work that no code of the process asked for is the scheduler's.
//
// The roles are the processes of the load harness's tunnel phases:
// relay and listen (devhook), server and client (chisel). How the table
// in docs/PERFORMANCE.md was made:
//
//	perf record -F 999 -g -p PID -o relay.data    # for each process, through a run of go run ./bench
//	perf script -i relay.data | go run ./bench/perfclass -role relay -cpu 49
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// category is a name and the frames that belong to it.
type category struct {
	name  string
	frame *regexp.Regexp
}

const (
	gcName    = "GC"
	schedName = "scheduler, netpoll"
	otherName = "other"
)

var (
	gcFrame    = regexp.MustCompile(`runtime\.(gcBgMarkWorker|gcAssistAlloc|bgsweep|bgscavenge|gcDrain|markroot|scanobject|scanObject|sweepone|wbBufFlush|gcStart|gcMarkDone|gcMarkTermination)`)
	schedFrame = regexp.MustCompile(`runtime\.(schedule|findRunnable|park_m|mcall|netpoll|sysmon|mstart|futex|notesleep|notewakeup|stopm|startm|wakep|runqsteal|gopark|goready|ready|goexit0|gosched|exitsyscall|entersyscall|checkTimers|runOneTimer|stealWork|usleep|osyield)|time\.Sleep|epoll`)
)

// roles are the categories of each process, the first that matches a
// frame from the leaf up deciding.
var roles = map[string][]category{
	"relay": {
		{"WebSocket write and read", regexp.MustCompile(`wire\.\(\*Writer\)|wire\.\(\*Reader\)|agentConn\)\.(readLoop|write)|gorilla/websocket|wire\.(DecodeFrame|AppendFrame)`)},
		{"routing, ids, metrics", regexp.MustCompile(`google/uuid|\(\*metrics\)|countDelivery|channelExists|\(\*Hub\)|agentConn\)\.(Deliver|unwait|holds)|waiter|observeIngress`)},
		{"public side", regexp.MustCompile(`ingressConn|ingressWriter|serveIngress|readBody|net/http|textproto|IngressListener|limitListener|handedConn|limitedReader`)},
	},
	"listen": {
		{"verify", regexp.MustCompile(`signature\.|ParseEvent|\(\*scanner\)|\(\*Agent\)\.verify`)},
		{"record: bbolt apply", regexp.MustCompile(`runJournal|flushLocked|storage\.\(\*DB\)\.(apply|flush)|go\.etcd\.io/bbolt|releaseMapped`)},
		{"record: journal", regexp.MustCompile(`storage\.\(\*DB\)\.(PutDelivery|AddAttempt|journal|write)|storage\.\(\*journal\)|recordDelivery|recordAttempt`)},
		{"public side", regexp.MustCompile(`\(\*hconn\)|\(\*exchange\)|roundTrip|sendDirect|connPool|\(\*Agent\)\.(forward|send)`)},
		{"WebSocket write and read", regexp.MustCompile(`relayclient|relay/wire|gorilla/websocket`)},
		{"--json line, inspector, hand-off, order", regexp.MustCompile(`cmd/devhook|main\.|inspector|publish|handOn|\(\*pool\)|runLine|orderLines|\(\*Agent\)\.(finish|process)`)},
	},
	"server": chiselRole,
	"client": chiselRole,
}

var chiselRole = []category{
	{"WebSocket write and read", regexp.MustCompile(`x/crypto|gorilla/websocket|chisel/share/cnet|crypto/`)},
	{"public side", regexp.MustCompile(`io\.Copy|io\.copyBuffer|ReadFrom|splice|chisel/share/tunnel|net\.\(\*TCPListener\)|net\.Dial|cio\.`)},
}

// classify reads perf script output and counts its samples by category.
func classify(r io.Reader, cats []category) (map[string]int, int, error) {
	counts := map[string]int{}
	total := 0
	var frames []string
	flush := func() {
		if len(frames) == 0 {
			return
		}
		total++
		counts[categoryOf(frames, cats)]++
		frames = frames[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inSample := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
			inSample = false
		case !inSample:
			inSample = true // the sample's own line: command, pid, time, event
		default:
			// "\tADDRESS SYMBOL+OFFSET (OBJECT)"
			f := strings.Fields(line)
			if len(f) >= 2 {
				frames = append(frames, f[1])
			}
		}
	}
	flush()
	return counts, total, sc.Err()
}

func categoryOf(frames []string, cats []category) string {
	for _, f := range frames {
		if gcFrame.MatchString(f) {
			return gcName
		}
	}
	for _, f := range frames {
		for _, c := range cats {
			if c.frame.MatchString(f) {
				return c.name
			}
		}
	}
	for _, f := range frames {
		if schedFrame.MatchString(f) {
			return schedName
		}
	}
	return otherName
}

func main() {
	role := flag.String("role", "", "the process: relay or listen (devhook), server or client (chisel)")
	cpu := flag.Float64("cpu", 0, "the process's CPU µs per delivery in the run: each share is also given in µs")
	flag.Parse()
	cats, ok := roles[*role]
	if !ok {
		fmt.Fprintln(os.Stderr, "perfclass: -role is relay, listen, server or client")
		os.Exit(2)
	}
	counts, total, err := classify(os.Stdin, cats)
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfclass:", err)
		os.Exit(1)
	}
	if total == 0 {
		fmt.Fprintln(os.Stderr, "perfclass: no samples on standard input (perf script -i FILE | perfclass ...)")
		os.Exit(1)
	}
	report(os.Stdout, counts, total, *cpu)
}

// report writes each category's share (and µs, when cpu is known), the
// largest first.
func report(w io.Writer, counts map[string]int, total int, cpu float64) {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	fmt.Fprintf(w, "%d samples\n", total)
	for _, n := range names {
		share := float64(counts[n]) / float64(total)
		if cpu > 0 {
			fmt.Fprintf(w, "%5.1f%%  %6.1f µs  %s\n", 100*share, share*cpu, n)
		} else {
			fmt.Fprintf(w, "%5.1f%%  %s\n", 100*share, n)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// child is a process the harness started (devhook, or a peer's server or
// client). Its stdout lines go to lines until the first one is taken by
// wait; the rest are counted and dropped. Its stderr's tail is kept for
// error messages.
type child struct {
	name string
	cmd  *exec.Cmd

	first   chan string // the first stdout line that ready accepts
	ready   func(line string) bool
	lines   int64
	dupes   int64
	watch   func(line string, at time.Time) // every line after the ready one; nil: none
	mu      sync.Mutex
	stderr  bytes.Buffer
	exited  chan struct{}
	exitErr error
}

// startChild runs bin with args. ready picks the line that says the child
// is up; startChild waits for it at most limit.
func startChild(ctx context.Context, name, bin string, args []string, ready func(string) bool, limit time.Duration) (*child, string, error) {
	c, err := spawn(name, bin, args, ready)
	if err != nil {
		return nil, "", err
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case line := <-c.first:
		return c, line, nil
	case <-c.exited:
		return nil, "", fmt.Errorf("%s exited before it was ready (%w): %s", name, c.exitErr, c.tail())
	case <-t.C:
		c.kill()
		return nil, "", fmt.Errorf("%s was not ready within %s: %s", name, limit, c.tail())
	case <-ctx.Done():
		c.kill()
		return nil, "", ctx.Err()
	}
}

// spawn runs bin with args and returns at once, without waiting for the
// child to be ready. ready picks the stdout line that c.first receives;
// nil takes none.
func spawn(name, bin string, args []string, ready func(string) bool) (*child, error) {
	return spawnIn("", nil, name, bin, args, ready)
}

// spawnIn is spawn with dir as the child's working directory (empty: the
// harness's) and env, such as "NODE_ENV=production", added to the
// harness's environment.
func spawnIn(dir string, env []string, name, bin string, args []string, ready func(string) bool) (*child, error) {
	if ready == nil {
		ready = func(string) bool { return false }
	}
	c := &child{name: name, first: make(chan string, 1), ready: ready, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Dir = dir
	c.cmd.Env = append(append(os.Environ(), "DEVHOOK_SECRET=", "DEVHOOK_RELAY_TOKEN="), env...)
	setDeathSignal(c.cmd)
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.cmd.Stderr = &tailWriter{c: c}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		c.scan(out)
	}()
	go func() {
		<-scanDone // Wait closes the pipe: read it to the end first
		c.exitErr = c.cmd.Wait()
		if c.exitErr == nil {
			c.exitErr = errors.New("exit status 0")
		}
		close(c.exited)
	}()
	return c, nil
}

func (c *child) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !found && c.ready(line) {
			found = true
			c.first <- line
			continue
		}
		c.mu.Lock()
		c.lines++
		if strings.Contains(line, `"duplicate":true`) {
			c.dupes++
		}
		watch := c.watch
		c.mu.Unlock()
		if watch != nil {
			watch(line, time.Now())
		}
	}
	io.Copy(io.Discard, r)
}

// setWatch makes f see every stdout line after the ready one from now on,
// with the time it was read; nil stops it. f runs on the reading
// goroutine: it must not block.
func (c *child) setWatch(f func(line string, at time.Time)) {
	c.mu.Lock()
	c.watch = f
	c.mu.Unlock()
}

// counts returns the stdout lines after the ready line, and those that
// report a duplicate delivery.
func (c *child) counts() (lines, dupes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines, c.dupes
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// kill ends the child and waits for it.
func (c *child) kill() {
	select {
	case <-c.exited:
		return
	default:
	}
	// Interrupt first, so that the child stops as a user's would (and
	// writes $DEVHOOK_CPUPROFILE); kill it if it does not.
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.exited:
		return
	case <-time.After(5 * time.Second):
	}
	c.cmd.Process.Kill()
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
	}
}

// crash kills the child at once (SIGKILL), as a machine that fails would
// lose it, and waits for it.
func (c *child) crash() {
	select {
	case <-c.exited:
		return
	default:
	}
	c.cmd.Process.Kill()
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
	}
}

func (c *child) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(c.stderr.String())
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// tailWriter keeps the last 16 KiB of a child's stderr.
type tailWriter struct{ c *child }

func (w *tailWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.stderr.Write(p)
	if n := w.c.stderr.Len(); n > 16<<10 {
		b := append([]byte(nil), w.c.stderr.Bytes()[n-8<<10:]...)
		w.c.stderr.Reset()
		w.c.stderr.Write(b)
	}
	return len(p), nil
}

// children owns every child process; killAll ends them all.
type children struct {
	mu   sync.Mutex
	list []*child
}

func (cs *children) add(c *child) {
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
}

func (cs *children) killAll() {
	cs.mu.Lock()
	list := cs.list
	cs.list = nil
	cs.mu.Unlock()
	for _, c := range list {
		c.kill()
	}
}

// mem is a process's memory from /proc/<pid>/status, in bytes: all zero
// where /proc is not available.
type mem struct {
	RSS  int64 // VmRSS: resident, anonymous and file-backed
	HWM  int64 // VmHWM: peak RSS
	Anon int64 // RssAnon: the process's own memory (heap, stacks)
	File int64 // RssFile: resident pages of mapped files (bbolt's mmap)
}

func memStatus(pid int) mem {
	var m mem
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return m
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.HWM
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		if f := strings.Fields(v); len(f) > 0 { // "12345 kB"
			n, _ := strconv.ParseInt(f[0], 10, 64)
			*dst = n << 10
		}
	}
	return m
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes, from
// /proc/loadavg; empty where that is not available.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuTime returns the user and system CPU time pid has used, from
// /proc/<pid>/stat; 0 where that is not available.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is the kernel's USER_HZ, 100 on every Linux that matters.
const clockTicks = 100

// resetPeak makes VmHWM start again from the current RSS (Linux 4.0+).
// It reports whether it could.
func resetPeak(pid int) bool {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0) == nil
}

// peakWatch samples the RSS of some processes every interval and keeps the
// largest value seen, beside the kernel's VmHWM.
type peakWatch struct {
	pids   []int
	reset  bool // VmHWM was reset at start: trust it
	mu     sync.Mutex
	peak   []mem // RSS and Anon: the largest sample
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

func watchPeaks(pids []int, interval time.Duration) *peakWatch {
	w := &peakWatch{pids: pids, peak: make([]mem, len(pids)), stop: make(chan struct{}), done: make(chan struct{}), reset: true}
	for _, p := range pids {
		if !resetPeak(p) {
			w.reset = false
		}
	}
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *peakWatch) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, p := range w.pids {
		m := memStatus(p)
		w.peak[i].RSS = max(w.peak[i].RSS, m.RSS)
		w.peak[i].Anon = max(w.peak[i].Anon, m.Anon)
	}
}

// finish stops sampling and returns each process's peaks: RSS is VmHWM
// since the reset when the reset worked, else the largest sample; Anon is
// the largest sample of RssAnon.
func (w *peakWatch) finish() []mem {
	w.closed.Do(func() { close(w.stop) })
	<-w.done
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]mem, len(w.pids))
	for i, p := range w.pids {
		out[i] = w.peak[i]
		if m := memStatus(p); w.reset && m.HWM > out[i].RSS {
			out[i].RSS = m.HWM
		}
	}
	return out
}

//go:build linux

package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A run's process tree on Linux. A process group is not enough: a child
// that calls setsid() (a daemon, a double fork) leaves the run's group and
// session, and once its parent exits it is no one's child the run can name.
// So:
//
//   - the emulator's process is a child subreaper (PR_SET_CHILD_SUBREAPER):
//     an orphan of any of its descendants is reparented to it, not to init;
//   - every execution is tracked from its start: a goroutine walks /proc
//     every trackInterval and keeps each process whose parent is one of the
//     run's (with its start time, so that a reused pid is never taken for
//     it);
//   - the race: a process can be born and orphaned between two walks, and
//     then its parent is the emulator, like every other run's orphans. Such
//     an orphan is the run's when its process group or session is one of
//     the run's processes' (what setsid() and setpgid() leave behind), or
//     when its environment carries the execution's marker (envMarker, set on
//     the run's process and inherited by everything it starts, unless a
//     program replaces its environment);
//   - to stop the tree, every process of it is first stopped (SIGSTOP), and
//     /proc walked again until a walk finds none that is new: a stopped
//     process cannot fork, so the tree is then complete, parents included.
//     Then every one is killed (SIGKILL), through a pidfd opened and checked
//     against the start time first, and the orphans among them reaped.
//
// What this cannot reach: a process born and orphaned within one walk's
// interval that both replaced its environment and left the run's groups
// and sessions. docs/EMULATOR.md says so.

// envMarker is the environment variable that marks an execution's processes.
const envMarker = "DEVHOOK_EMULATOR_RUN"

// trackInterval is how often /proc is walked while a run executes.
const trackInterval = 100 * time.Millisecond

// procInfo is what /proc/<pid>/stat says of a process.
type procInfo struct {
	ppid, pgrp, sid int
	state           byte
	start           uint64 // clock ticks after boot: with the pid, the process's identity
}

// procTree follows the processes of one execution.
type procTree struct {
	root  int
	token string
	self  int
	logf  func(string, ...any)

	mu      sync.Mutex
	members map[int]uint64 // pid → start time of the run's processes alive at the last walk
	ids     map[int]bool   // every pid that was a member: groups and sessions named after them are the run's
	others  map[[2]uint64]bool
	noProc  bool // /proc could not be read: only the process group is reachable

	stop chan struct{}
	done chan struct{}
}

// prepareCmd gives the command a process group of its own and the marker
// of its execution in its environment. (No Pdeathsig: it follows the
// thread that started the process, which Go may end.)
func prepareCmd(cmd *exec.Cmd, token string) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(cmd.Env, envMarker+"="+token)
}

// startTree makes the emulator a subreaper (once is enough; again is
// harmless) and starts following the started command's processes.
func startTree(cmd *exec.Cmd, token string, logf func(string, ...any)) *procTree {
	t := &procTree{root: cmd.Process.Pid, token: token, self: os.Getpid(), logf: logf,
		members: map[int]uint64{}, ids: map[int]bool{}, others: map[[2]uint64]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		logf("emulator: cannot become a child subreaper (%v): a run's process that leaves its group and is orphaned escapes cancel and timeout", err)
	}
	t.ids[t.root] = true
	if st, err := readStat(t.root); err == nil {
		t.members[t.root] = st.start
	}
	go t.track()
	return t
}

func (t *procTree) track() {
	defer close(t.done)
	tick := time.NewTicker(trackInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.walk()
		}
	}
}

// close stops following the tree (kill does it too).
func (t *procTree) close() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
}

// walk reads /proc once and brings members up to date: it adds every
// process that is the run's, drops the ones that are gone, and reaps the
// run's orphans that have exited. It returns the members that are alive
// (not zombies) and how many it added.
func (t *procTree) walk() (alive map[int]uint64, added int) {
	procs, err := readProcs()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if !t.noProc {
			t.noProc = true
			t.logf("emulator: cannot read /proc (%v): a run's processes outside its process group cannot be followed", err)
		}
		return nil, 0
	}
	for pid, start := range t.members {
		if p, ok := procs[pid]; !ok || p.start != start {
			delete(t.members, pid)
		}
	}
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	queue := make([]int, 0, len(t.members))
	for pid := range t.members {
		queue = append(queue, pid)
	}
	add := func(pid int) {
		t.members[pid] = procs[pid].start
		t.ids[pid] = true
		queue = append(queue, pid)
		added++
	}
	for {
		for len(queue) > 0 {
			pid := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			for _, c := range children[pid] {
				if _, ok := t.members[c]; !ok {
					add(c)
				}
			}
		}
		// The emulator's own children that no walk has placed: orphans
		// of this run, of another run, or of whatever else the emulator's
		// process started.
		for _, pid := range children[t.self] {
			if _, ok := t.members[pid]; ok {
				continue
			}
			p := procs[pid]
			id := [2]uint64{uint64(pid), p.start}
			if t.others[id] {
				continue
			}
			if t.named(p.pgrp, procs) || t.named(p.sid, procs) {
				add(pid)
				continue
			}
			if marked, known := hasMarker(pid, t.token); marked {
				add(pid)
			} else if known {
				t.others[id] = true
			}
		}
		if len(queue) == 0 {
			break
		}
	}
	alive = map[int]uint64{}
	for pid, start := range t.members {
		p := procs[pid]
		if p.state == 'Z' {
			if p.ppid == t.self && pid != t.root {
				// An orphan of the run that has exited: the emulator is its
				// parent now, and reaps it. (The run's own process is
				// reaped by its exec.Cmd.)
				var ws unix.WaitStatus
				unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
			continue
		}
		alive[pid] = start
	}
	return alive, added
}

// named says whether a process group or session id is one the run's
// processes made. A pid is not reused while a group or session of that id
// lives, so the id is the run's unless a process that is not the run's
// now has that pid (the run's group died out, and the pid went to another).
func (t *procTree) named(id int, procs map[int]procInfo) bool {
	if !t.ids[id] {
		return false
	}
	p, ok := procs[id]
	if !ok {
		return true // the leader is gone; the group or session lives on
	}
	start, member := t.members[id]
	return member && start == p.start
}

// kill stops the whole tree: every process is stopped, the tree walked
// again until it is complete, then every process killed and the run's
// orphans reaped. It returns once none is alive, or after a generous
// bound when one will not die (a process in uninterruptible sleep).
func (t *procTree) kill() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
	t.walk()
	t.mu.Lock()
	noProc := t.noProc
	t.mu.Unlock()
	if noProc {
		// Without /proc, the group is all there is to reach (its id may
		// have gone to another group once the run's was empty, as with
		// any process-group kill). With /proc, the walk below reaches the
		// group's members, each checked.
		syscall.Kill(-t.root, syscall.SIGKILL)
		return
	}
	stopped := map[int]bool{}
	for round := 0; round < 100; round++ {
		alive, added := t.walk()
		for pid, start := range alive {
			if !stopped[pid] {
				signal(pid, start, unix.SIGSTOP)
				stopped[pid] = true
			}
		}
		if added == 0 && round > 0 {
			break
		}
	}
	wait := time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		alive, _ := t.walk()
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			pids := make([]string, 0, len(alive))
			for pid := range alive {
				pids = append(pids, strconv.Itoa(pid))
			}
			t.logf("emulator: processes %s of a run are still alive 30 s after SIGKILL", strings.Join(pids, ", "))
			return
		}
		for pid, start := range alive {
			signal(pid, start, unix.SIGKILL)
		}
		time.Sleep(wait) // a killed process takes a moment to exit: nothing to wait on but /proc
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// signal sends sig to pid if it is still the process that started at
// start: through a pidfd, checked after it is opened, so that a pid reused
// in between is left alone.
func signal(pid int, start uint64, sig unix.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			if st, err := readStat(pid); err == nil && st.start == start {
				unix.Kill(pid, sig)
			}
		}
		return
	}
	defer unix.Close(fd)
	if st, err := readStat(pid); err != nil || st.start != start {
		return
	}
	unix.PidfdSendSignal(fd, sig, nil, 0)
}

// readProcs reads the stat of every process.
func readProcs() (map[int]procInfo, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	procs := make(map[int]procInfo, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, err := readStat(pid); err == nil {
			procs[pid] = p
		}
	}
	if len(procs) == 0 {
		return nil, errors.New("no process listed")
	}
	return procs, nil
}

// readStat parses /proc/<pid>/stat: the command name, in parentheses, may
// hold spaces and parentheses, so fields are counted after its last ")".
func readStat(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid 4, pgrp 5, session 6, starttime 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var p procInfo
	p.state = f[0][0]
	var errs [4]error
	p.ppid, errs[0] = strconv.Atoi(f[1])
	p.pgrp, errs[1] = strconv.Atoi(f[2])
	p.sid, errs[2] = strconv.Atoi(f[3])
	p.start, errs[3] = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return p, nil
}

// hasMarker says whether the process's environment holds the marker of
// the execution token; known is false when the environment could not be
// read (a zombie has none; a process may be in the middle of an exec).
func hasMarker(pid int, token string) (marked, known bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || len(b) == 0 {
		return false, false
	}
	want := []byte(envMarker + "=" + token)
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true, true
		}
	}
	return false, true
}

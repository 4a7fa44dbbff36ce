//go:build unix && !linux

package emulator

import (
	"os/exec"
	"syscall"
)

// Where there is no /proc to follow a run's processes with and no child
// subreaper, a run's processes are its process group: a child that leaves
// the group (setsid) outlives a cancel or timeout. docs/EMULATOR.md says so.

// procTree is the process group of one execution.
type procTree struct{ root int }

// prepareCmd gives the command a process group of its own.
func prepareCmd(cmd *exec.Cmd, token string) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func startTree(cmd *exec.Cmd, token string, logf func(string, ...any)) *procTree {
	return &procTree{root: cmd.Process.Pid}
}

// kill kills the whole process group.
func (t *procTree) kill() { syscall.Kill(-t.root, syscall.SIGKILL) }

func (t *procTree) close() {}

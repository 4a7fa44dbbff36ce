//go:build unix

package emulator

import (
	"os/exec"
	"syscall"
)

// ownGroup gives the command a process group of its own. (No Pdeathsig:
// it follows the thread that started the process, which Go may end.)
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the command's whole process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

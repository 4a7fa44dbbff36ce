//go:build !unix

package emulator

import "os/exec"

// ownGroup does nothing here: process groups are set up on Unix only.
func ownGroup(cmd *exec.Cmd) {}

// killGroup kills the command's process; what it started may live on
// where process groups are not set up.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}

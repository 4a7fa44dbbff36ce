//go:build !unix

package emulator

import (
	"os"
	"os/exec"
)

// Where process groups are not set up, only a run's own process is
// killed: what it started may live on. docs/EMULATOR.md says so.

// procTree is the process of one execution.
type procTree struct{ p *os.Process }

func prepareCmd(cmd *exec.Cmd, token string) {}

func startTree(cmd *exec.Cmd, token string, logf func(string, ...any)) *procTree {
	return &procTree{p: cmd.Process}
}

func (t *procTree) kill() { t.p.Kill() }

func (t *procTree) close() {}

//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing here: children are killed on the way out.
func setDeathSignal(*exec.Cmd) {}

// raiseFileLimit reports no limit it could raise.
func raiseFileLimit() uint64 { return 0 }

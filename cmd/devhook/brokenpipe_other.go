//go:build !unix

package main

// brokenOutput: see brokenpipe_unix.go. Elsewhere a write to a closed
// output fails without a signal.
func brokenOutput() string { return "" }

// watchClosedOutputs: see brokenpipe_unix.go. Nothing is watched.
func watchClosedOutputs() (closed <-chan string, stop func()) { return nil, func() {} }

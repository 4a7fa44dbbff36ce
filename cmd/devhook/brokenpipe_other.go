//go:build !unix

package main

// brokenOutput: see brokenpipe_unix.go. Elsewhere a write to a closed
// output fails without a signal.
func brokenOutput() string { return "" }

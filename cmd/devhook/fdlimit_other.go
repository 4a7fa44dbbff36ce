//go:build !unix

package main

// defaultMaxConns: see fdlimit_unix.go.
func defaultMaxConns() int { return 10000 }

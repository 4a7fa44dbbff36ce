//go:build unix

package main

import "syscall"

// defaultMaxConns is how many connections the relay keeps open at once by
// default: the process's descriptor limit (Go raises the soft limit to the
// hard one at start) less a reserve for its files and the descriptors of
// connections being accepted.
func defaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 2048 {
		return 1024
	}
	return int(min(rl.Cur-1024, 1<<20))
}

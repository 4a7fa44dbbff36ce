// Package blocks is a fixture of scripts/stress's test: its test writes
// its pid to $STRESS_FIXTURE_PIDFILE and blocks until it is stopped.
package blocks

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func TestBlocks(t *testing.T) {
	if f := os.Getenv("STRESS_FIXTURE_PIDFILE"); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Hour) // until scripts/stress stops it
}

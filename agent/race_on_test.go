//go:build race

package agent_test

// raceEnabled: the race detector makes sync.Pool drop items at random and
// allocates on its own, so allocation counts are not checked under it.
const raceEnabled = true

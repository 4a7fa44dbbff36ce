//go:build race

package signature_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are not checked under it.
const raceEnabled = true

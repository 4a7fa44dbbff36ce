//go:build race

package storage_test

// raceEnabled: the race detector is on, and allocation counts are its own
// (sync.Pool drops items at random).
const raceEnabled = true

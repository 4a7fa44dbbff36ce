package agent

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The agents of a relay instance that dies spread over the others: each
// agent tries the fallbacks in an order of its own.
func TestFallbacksSpreadOverTheInstances(t *testing.T) {
	fallbacks := []string{"http://b", "http://c", "http://d"}
	firsts := map[string]int{}
	for seed := range uint64(300) {
		a := testAgent(t, false, func(c *Config) { c.Rand = rand.New(rand.NewPCG(seed, 1)).Int64N })
		got := a.shuffled(fallbacks)
		if s := slices.Sorted(slices.Values(got)); !slices.Equal(s, fallbacks) {
			t.Fatalf("shuffled %v into %v", fallbacks, got)
		}
		firsts[got[0]]++
	}
	if !slices.Equal(fallbacks, []string{"http://b", "http://c", "http://d"}) {
		t.Fatalf("the config's list was changed: %v", fallbacks)
	}
	for _, u := range fallbacks {
		if firsts[u] < 60 { // 100 expected of 300
			t.Errorf("%s tried first by %d of 300 agents: %v", u, firsts[u], firsts)
		}
	}
}

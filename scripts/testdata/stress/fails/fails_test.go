// Package fails is a fixture of scripts/stress's test: one test fails.
package fails

import "testing"

func TestPasses(t *testing.T) {}

func TestFailsOnPurpose(t *testing.T) { t.Error("failing on purpose") }

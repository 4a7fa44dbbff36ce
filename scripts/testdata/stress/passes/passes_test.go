// Package passes is a fixture of scripts/stress's test: it passes.
package passes

import "testing"

func TestPasses(t *testing.T) {}

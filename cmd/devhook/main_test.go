package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	flush := errors.New("close the delivery store: the final flush failed")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"none", nil, 0},
		{"Ctrl-C", context.Canceled, 0},
		{"Ctrl-C, wrapped", fmt.Errorf("listen: %w", context.Canceled), 0},
		{"Ctrl-C twice, joined", errors.Join(context.Canceled, fmt.Errorf("agent: %w", context.Canceled)), 0},
		{"a failure", flush, 1},
		{"a failure joined with Ctrl-C", errors.Join(context.Canceled, flush), 1},
		{"a failure wrapping a join with Ctrl-C", fmt.Errorf("listen: %w", errors.Join(flush, context.Canceled)), 1},
		{"check's own status", &exitError{code: 2, err: errors.New("unreachable")}, 2},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

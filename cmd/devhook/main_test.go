package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

func TestExitStatus(t *testing.T) {
	flush := errors.New("close the delivery store: the final flush failed")
	sigint, sigterm := &interruptError{sig: os.Interrupt}, &interruptError{sig: syscall.SIGTERM}
	played := fmt.Errorf("%w at delivery 2 of 3", sigint)
	flushed := errors.Join(context.Canceled, flush)
	closed := &interruptError{sig: syscall.SIGPIPE, output: "standard output"}
	epipe := &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EPIPE}
	said := fmt.Errorf("stopped: %w", closed)
	for _, tc := range []struct {
		name    string
		err     error
		cause   error // the context's, as main reads it
		want    int
		message string
	}{
		{"none", nil, nil, 0, ""},
		{"a failure", flush, nil, 1, flush.Error()},
		{"check's own status", &exitError{code: 2, err: errors.New("unreachable")}, nil, 2, "unreachable"},
		{"a cancellation no signal explains", context.Canceled, nil, 1, "context canceled"},

		{"SIGINT, the command stopped cleanly", nil, sigint, 130, ""},
		{"SIGTERM, the command stopped cleanly", nil, sigterm, 143, ""},
		{"SIGINT, the bare cancellation", fmt.Errorf("GET /v1/webhooks: %w", context.Canceled), sigint, 130, ""},
		{"SIGINT, cancelled twice, joined", errors.Join(context.Canceled, fmt.Errorf("agent: %w", context.Canceled)), sigint, 130, ""},
		{"SIGINT, what the command says of it", played, sigint, 130, played.Error()},
		{"SIGTERM, a failure joined with the cancellation", flushed, sigterm, 143, flushed.Error()},
		{"a closed output, the command stopped cleanly", nil, closed, 141, ""},
		{"a closed output, the writes that met it", fmt.Errorf("list: %w", epipe), closed, 141, ""},
		{"a closed output, said by a server", errors.Join(said, fmt.Errorf("close the output: %w", epipe)), closed, 141, said.Error()},
		{"a closed output, a failure besides", errors.Join(epipe, flush), closed, 141, flush.Error()},
		{"SIGINT beats check's own status", &exitError{code: 1, err: errors.New("differs")}, sigint, 130, "differs"},
	} {
		code, msg := exitStatus(tc.err, tc.cause)
		if code != tc.want || msg != tc.message {
			t.Errorf("%s: exitStatus(%v, %v) = %d, %q; want %d, %q", tc.name, tc.err, tc.cause, code, msg, tc.want, tc.message)
		}
	}
}

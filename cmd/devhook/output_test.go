package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowWriter records each Write it gets and lets the test hold the first.
type slowWriter struct {
	mu     sync.Mutex
	writes []string
	enter  chan struct{} // a Write started
	gate   chan struct{} // closed: Writes may finish
}

func (s *slowWriter) Write(p []byte) (int, error) {
	s.enter <- struct{}{}
	<-s.gate
	s.mu.Lock()
	s.writes = append(s.writes, string(p))
	s.mu.Unlock()
	return len(p), nil
}

// Lines written while another Write is in progress go out together in its
// next write, whole and in order; nothing is lost.
func TestLineWriter_CombinesWhileBusy(t *testing.T) {
	s := &slowWriter{enter: make(chan struct{}, 100), gate: make(chan struct{})}
	l := newLineWriter(s, 0)
	first := make(chan struct{})
	go func() {
		defer close(first)
		l.Write([]byte("line 0\n"))
	}()
	<-s.enter // the first Write is in write(2)
	for i := 1; i <= 50; i++ {
		if _, err := fmt.Fprintf(l, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	close(s.gate)
	<-first
	if len(s.writes) != 2 {
		t.Fatalf("%d writes, want 2 (the first line, then the 50 that waited): %q", len(s.writes), s.writes)
	}
	var want strings.Builder
	for i := 0; i <= 50; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := strings.Join(s.writes, ""); got != want.String() {
		t.Fatalf("written:\n%s\nwant:\n%s", got, want.String())
	}
}

// Many goroutines at once: every line arrives whole.
func TestLineWriter_Concurrent(t *testing.T) {
	var buf bytes.Buffer
	l := newLineWriter(&buf, 0) // only the goroutine writing touches buf
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				fmt.Fprintf(l, "g%d line %d %s\n", g, i, strings.Repeat("x", i%50))
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	seen := map[string]bool{}
	for _, line := range lines {
		var g, i int
		var xs string
		n, _ := fmt.Sscanf(line, "g%d line %d %s", &g, &i, &xs)
		if n < 2 || (i%50 != 0 && xs != strings.Repeat("x", i%50)) || seen[line] {
			t.Fatalf("torn or repeated line %q", line)
		}
		seen[line] = true
	}
}

// recWriter records each Write it gets.
type recWriter struct {
	mu     sync.Mutex
	writes []string
}

func (r *recWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *recWriter) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

// The first line goes out at once; lines within the gap after it wait
// and go out together; Close writes what waits.
func TestLineWriter_GapBoundsWrites(t *testing.T) {
	var r recWriter
	l := newLineWriter(&r, time.Hour)
	fmt.Fprintf(l, "first\n")
	if got := r.got(); len(got) != 1 || got[0] != "first\n" {
		t.Fatalf("after the first line: %q", got)
	}
	for i := range 3 {
		fmt.Fprintf(l, "line %d\n", i)
	}
	if got := r.got(); len(got) != 1 {
		t.Fatalf("lines within the gap went out: %q", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.got(); len(got) != 2 || got[1] != "line 0\nline 1\nline 2\n" {
		t.Fatalf("after Close: %q", got)
	}
	fmt.Fprintf(l, "after close\n") // at once
	if got := r.got(); len(got) != 3 {
		t.Fatalf("a line after Close waited: %q", got)
	}
}

// Lines that wait go out when the gap has passed, without Close.
func TestLineWriter_TimerWrites(t *testing.T) {
	var r recWriter
	l := newLineWriter(&r, 20*time.Millisecond)
	defer l.Close()
	fmt.Fprintf(l, "a\n")
	fmt.Fprintf(l, "b\n")
	fmt.Fprintf(l, "c\n")
	deadline := time.Now().Add(5 * time.Second)
	for len(r.got()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting lines were never written: %q", r.got())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.got(); len(got) != 2 || got[0] != "a\n" || got[1] != "b\nc\n" {
		t.Fatalf("writes: %q", got)
	}
}

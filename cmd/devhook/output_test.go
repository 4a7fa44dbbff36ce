package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
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
	l := newLineWriter(s)
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
	l := newLineWriter(&buf) // only the goroutine writing touches buf
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

package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/relay"
)

// A sender's bytes, and when they arrive after the body's start.
type arrival struct {
	at time.Duration
	n  int
}

// every is n bytes each step from from until to (excluded).
func every(from, step, to time.Duration, n int) []arrival {
	var a []arrival
	for t := from; t < to; t += step {
		a = append(a, arrival{t, n})
	}
	return a
}

// The rule that cuts a body that stalls or crawls, with the clock in the
// test's hands: when each sender is cut, and why. The read deadline the
// connection gets is never before the rule's, nor later than an eighth
// of the stall (or window) after it, and it moves at most once per
// eighth while a body streams.
func TestBodyPace(t *testing.T) {
	const (
		stall  = 5 * time.Second // the defaults
		window = 5 * time.Second
		slack  = stall / 8
	)
	never := time.Duration(1 << 62)
	for _, tc := range []struct {
		name     string
		cfg      relay.Config
		arrivals []arrival
		cutAt    time.Duration // never: the body is all in
		why      string
	}{
		{"silent from the start", relay.Config{}, nil, stall, "no byte of the body arrived for 5s"},
		{"silent, no stall bound", relay.Config{BodyStall: -1}, nil, 2 * window, "at 0 bytes/s over 5s, under the relay's minimum of 16384 bytes/s"},
		{"silent, neither bound", relay.Config{BodyStall: -1, BodyMinRate: -1}, nil, relay.DefaultBodyTimeout, "did not arrive within 30s"},
		{"2 MiB, then silent", relay.Config{}, []arrival{{100 * time.Millisecond, 2 << 20}}, 100*time.Millisecond + stall, "no byte of the body arrived for 5s"},
		{"2 MiB, then a byte every 4 s", relay.Config{}, append([]arrival{{100 * time.Millisecond, 2 << 20}}, every(4100*time.Millisecond, 4*time.Second, time.Minute, 1)...),
			2 * window, "under the relay's minimum of 16384 bytes/s"},
		{"2 MiB, then a byte every 4 s, no rate bound", relay.Config{BodyMinRate: -1}, append([]arrival{{100 * time.Millisecond, 2 << 20}}, every(4100*time.Millisecond, 4*time.Second, time.Minute, 1)...),
			relay.DefaultBodyTimeout, "did not arrive within 30s"},
		{"20 KiB/s in 1 KiB pieces", relay.Config{}, every(0, 50*time.Millisecond, 25*time.Second, 1<<10), never, ""},
		{"100 KiB every 4.5 s", relay.Config{}, every(0, 4500*time.Millisecond, 29*time.Second, 100<<10), never, ""},
		{"20 KiB/s for ever", relay.Config{}, every(0, 50*time.Millisecond, time.Minute, 1<<10), relay.DefaultBodyTimeout, "did not arrive within 30s"},
		{"a window short by a byte", relay.Config{BodyStall: -1}, []arrival{{0, 1 << 20}, {6 * time.Second, 80<<10 - 1}}, 2 * window,
			"at 16383 bytes/s over 5s"},
		// A read just after a window's end counts for it when it is short:
		// its bytes may have come before the end.
		{"a window completed by a late read", relay.Config{BodyStall: -1}, []arrival{{0, 1}, {6 * time.Second, 40 << 10}, {window*2 + slack/2, 40 << 10}, {11 * time.Second, 1 << 20}}, never, ""},
		{"a late read that does not complete it", relay.Config{BodyStall: -1}, []arrival{{0, 1}, {6 * time.Second, 40 << 10}, {window*2 + slack/2, 1 << 10}}, window*2 + slack/2,
			"at 8396 bytes/s over 5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1_000_000, 0)
			p := relay.NewBodyPace(t0, tc.cfg)
			check := func(at time.Duration) {
				t.Helper()
				d, r := p.Deadline(), p.Rule()
				if d.Before(r) || d.Sub(r) > slack {
					t.Fatalf("at %s: read deadline %s, rule %s: want the rule, or at most %s after", at, d.Sub(t0), r.Sub(t0), slack)
				}
				if d.After(t0.Add(relay.DefaultBodyTimeout)) {
					t.Fatalf("at %s: read deadline %s, past the body timeout", at, d.Sub(t0))
				}
			}
			check(0)
			cutAt, why, moves, last := never, "", 0, p.Deadline()
			for _, a := range tc.arrivals {
				if dl := p.Deadline(); t0.Add(a.at).After(dl) {
					cutAt, why = dl.Sub(t0), p.Why()
					break
				}
				if !p.Arrived(t0.Add(a.at), a.n) {
					cutAt, why = a.at, "window" // the reason is readBody's (crawled)
					break
				}
				check(a.at)
				if !p.Deadline().Equal(last) {
					moves, last = moves+1, p.Deadline()
				}
			}
			if cutAt == never && len(tc.arrivals) == 0 || tc.cutAt != never && cutAt == never {
				cutAt, why = p.Deadline().Sub(t0), p.Why()
			}
			switch {
			case tc.cutAt == never && cutAt != never:
				t.Fatalf("cut at %s (%s), want the body in", cutAt, why)
			case tc.cutAt != never && (cutAt < tc.cutAt || cutAt > tc.cutAt+slack):
				t.Fatalf("cut at %s (%s), want %s, or at most %s after", cutAt, why, tc.cutAt, slack)
			case why != "window" && !strings.Contains(why, tc.why):
				t.Fatalf("cut for %q, want %q", why, tc.why)
			}
			if end := tc.arrivals; len(end) > 0 {
				if most := int(end[len(end)-1].at/slack) + 2; moves > most {
					t.Fatalf("the read deadline moved %d times, want at most one per %s (%d)", moves, slack, most)
				}
			}
		})
	}
}

// BenchmarkBodyPace is what the pace costs a read of a body that streams
// (readBody adds a time.Now to it): bytes counted, windows judged and the
// read deadline's move decided.
func BenchmarkBodyPace(b *testing.B) {
	t0 := time.Now()
	p := relay.NewBodyPace(t0, relay.Config{BodyTimeout: 1 << 62})
	b.ReportAllocs()
	for i := range b.N {
		if !p.Arrived(t0.Add(time.Duration(i)*time.Microsecond), 1<<10) { // 1 GB/s
			b.Fatal("cut")
		}
	}
}

package main

// Senders fanned out over a cluster: every request names one agent's channel
// and goes through one relay instance, so that each channel is reached
// through each instance alike, as senders behind a load balancer would
// reach them.

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
)

// fanout is where a cluster phase's requests go. Request i is for channel
// i mod len(paths), through instance ⌊i / len(paths)⌋ mod len(bases):
// round-robin over the instances, and over every pair of channel and
// instance, whatever the two counts (with i mod len(bases) instead, 6
// channels over 3 instances would each always come through the same one).
//
// An instance that a sender could not reach (its connection failed) is
// down from then on, until up says otherwise: its requests go to the next
// instance that is not, as a load balancer's passive health check would
// send them. The failed request itself is not sent again: the sender saw
// the failure, and the service resends it.
type fanout struct {
	bases []string // each instance's base URL
	paths []string // each channel's path on any instance, such as /c/<channel>/hook
	down  []atomic.Bool
}

func newFanout(bases, paths []string) *fanout {
	return &fanout{bases: bases, paths: paths, down: make([]atomic.Bool, len(bases))}
}

// instance is the instance request i goes through: its own, or the next
// that is up; its own when every one is down.
func (s *fanout) instance(i int) int {
	k := (i / len(s.paths)) % len(s.bases)
	for j := range s.bases {
		if at := (k + j) % len(s.bases); !s.down[at].Load() {
			return at
		}
	}
	return k
}

// to is request i's target.
func (s *fanout) to(i int) target {
	return target{URL: s.bases[s.instance(i)] + s.paths[i%len(s.paths)]}
}

// plan is the senders' plan: request i to to(i), marking its instance
// down when its connection failed (not when it timed out: a slow
// instance is not a dead one), keeping which requests were answered.
func (s *fanout) plan() plan {
	return plan{to: s.to, keepOK: true, refused: func(t target, err error) {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return
		}
		for k, b := range s.bases {
			if strings.HasPrefix(t.URL, b+"/") {
				s.down[k].Store(true)
			}
		}
	}}
}

// up says instance k takes requests again.
func (s *fanout) up(k int) { s.down[k].Store(false) }

package storage

import (
	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Routes returns, for each of ids that has one, the route that took it
// (listen --route): the route recorded with its first attempt that is not
// a replay and carries one, as devhook.Delivery.ArrivalRoute finds it. It
// reads the attempts' optional fields alone, for a list's rows, and
// decodes each route once however many deliveries it took; an attempt
// that fails its checks is left to the reads that report it.
func (db *DB) Routes(ids []string) (map[string]devhook.Route, error) {
	out := make(map[string]devhook.Route, len(ids))
	err := db.view(func(v *view) error {
		r := routeReader{v: v, known: map[string]*devhook.Route{}}
		if v.attempts != nil {
			r.c = v.attempts.Cursor()
		}
		for _, id := range ids {
			if validID("delivery", id) != nil {
				continue
			}
			if rt := r.route(id); rt != nil {
				out[id] = *rt
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// routeReader reads the routes of deliveries in one view.
type routeReader struct {
	v     *view
	c     *bolt.Cursor
	known map[string]*devhook.Route // by encoded value
}

// route is the route that took delivery id, from bbolt's attempts and the
// journal's, in Seq order.
func (r *routeReader) route(id string) *devhook.Route {
	best, bestSeq := (*devhook.Route)(nil), 0
	if r.c != nil {
		prefix := attemptPrefix([]byte(id))
		for k, val := r.c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, val = r.c.Next() {
			if seq, rt := r.routeOf(val); rt != nil {
				best, bestSeq = rt, seq // the first of bbolt's in Seq order
				break
			}
		}
	}
	for _, a := range r.v.atts[id] {
		if seq, rt := r.routeOf(a.enc); rt != nil && (best == nil || seq < bestSeq) {
			best, bestSeq = rt, seq
		}
	}
	return best
}

// routeOf returns the Seq and the route of the attempt value b, without
// decoding the rest of it; no route for a replay, an attempt without one,
// or a value that fails its checks.
func (r *routeReader) routeOf(b []byte) (int, *devhook.Route) {
	p, checked, err := openValue(b, kindAttempt, formatAttempt)
	if err != nil || !checked {
		return 0, nil // no optional fields before checksums
	}
	dec := decoder{b: p}
	seq := int(dec.int())
	if string(dec.raw()) == devhook.AttemptReplay {
		return 0, nil
	}
	dec.raw()  // Target
	dec.time() // StartedAt
	dec.int()  // Duration
	if dec.bool() {
		dec.raw() // Method
		dec.raw() // Path
		dec.raw() // RawQuery
		dec.skipHeader()
		dec.raw() // Body
		dec.bool()
	}
	dec.int() // Status
	dec.skipHeader()
	dec.raw() // Body
	dec.raw() // Error
	for dec.err == nil && len(dec.b) > 0 {
		tag := dec.uint()
		v := dec.raw()
		if tag != attemptRoute || dec.err != nil {
			continue
		}
		if rt, ok := r.known[string(v)]; ok {
			return seq, rt
		}
		rt := decodeRoute(v)
		r.known[string(v)] = rt
		return seq, rt
	}
	return 0, nil
}

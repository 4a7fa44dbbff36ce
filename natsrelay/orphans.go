package natsrelay

// Objects no entry points to, and their removal.
//
// A large delivery's object is written before its entry (entries.go).
// When JetStream refuses the entry (the queue is full: the sender gets
// 503), the writer deletes the object at once (dropRefused). What is left
// when the writer cannot (it died, or lost NATS, between the object and
// the entry, or while writing the object's chunks; a removal whose object
// deletion failed) is removed by the sweep, which every instance runs from
// Expire (so every Config's SweepInterval, see relay/sweep.go), at most
// once every OrphanGrace/2, or later after a failure (backoff):
//
//   - an object (its metadata in the bucket) older than OrphanGrace that
//     no queued or parked entry points to is deleted; older than
//     OrphanGrace so that a writer between its two steps (which take at
//     most Config.Timeout) never loses its object. The deletion is a
//     compare-and-set on the object's metadata, expecting the version
//     read before the entries were looked for: an object written again
//     meanwhile under the same name is not touched;
//   - chunks older than OrphanGrace that no object's metadata names (a
//     writer that died between them and the metadata; an object replaced
//     or deleted whose old chunks could not be purged) are purged.
//
// Each is counted in OrphansRemoved (devhook_relay_queue_orphans_removed_total
// in /metrics) and each sweep that removes some logs one line with the
// count. The bucket's TTL (Quota.MaxAge and an hour) stays a last resort.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultOrphanGrace is Config.OrphanGrace's default: how old an object
// no entry points to must be before the sweep removes it.
const DefaultOrphanGrace = 10 * time.Minute

// orphanBackoffMin and orphanBackoffMax bound the wait before the next
// sweep after a failed one.
const (
	orphanBackoffMin = time.Minute
	orphanBackoffMax = 30 * time.Minute
)

// orphanSweep is the state of a Store's sweeps of orphans.
type orphanSweep struct {
	mu      sync.Mutex
	next    time.Time // not before
	b       backoff
	log     repeatLog
	removed atomic.Uint64
}

func (o *orphanSweep) init() {
	o.b = backoff{Min: orphanBackoffMin, Max: orphanBackoffMax}
	o.log.every = time.Hour
}

// OrphansRemoved returns the number of objects (or sets of chunks) no
// entry pointed to that this Store's sweeps removed: for /metrics
// (relay.OrphanCounter).
func (s *Store) OrphansRemoved() uint64 { return s.orphans.removed.Load() }

// bucket is the name of the bucket of large deliveries.
func (s *Store) bucket() string { return s.cfg.Prefix + "_large" }

// sweepOrphans runs the sweep of orphans if it is due at now.
func (s *Store) sweepOrphans(now time.Time) {
	o := &s.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Before(o.next) || s.objStream == nil {
		return
	}
	r, err := s.removeOrphans(now)
	if n := r.objects + r.chunkSets; n > 0 {
		o.removed.Add(uint64(n))
		s.cfg.Logf("relay: %d orphans removed from bucket %s, left by writes refused or cut short: %d objects of large deliveries (%d bytes) no queued or parked delivery pointed to for %s, %d sets of chunks (%d chunks) with no object",
			n, s.bucket(), r.objects, r.bytes, s.cfg.OrphanGrace, r.chunkSets, r.chunks)
	}
	if err != nil {
		wait := o.b.next()
		o.next = now.Add(wait)
		o.log.fail(s.cfg.Logf, now, "relay: sweep bucket %s of objects no delivery points to: %v (tried again in %s)", s.bucket(), err, wait.Round(time.Second))
		return
	}
	o.log.ok(s.cfg.Logf, now, "relay: sweep of bucket "+s.bucket()+" done")
	o.b.reset()
	o.next = now.Add(s.cfg.OrphanGrace / 2)
}

// removed is what a sweep of orphans removed.
type removed struct {
	objects   int
	bytes     int64 // of the objects
	chunkSets int   // sets of chunks no object named
	chunks    int   // in those sets
}

// removeOrphans removes the orphans older than OrphanGrace at now, as the
// top of this file says, and returns what it removed.
func (s *Store) removeOrphans(now time.Time) (removed, error) {
	var r removed
	ctx, cancel, err := s.link.ctx(context.Background(), 10*s.cfg.Timeout)
	if err != nil {
		return r, err
	}
	defer cancel()
	cutoff := now.Add(-s.cfg.OrphanGrace)
	infos, err := s.objects.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return r, fmt.Errorf("list the objects: %w", why(ctx, err))
	}
	named := make(map[string]bool, len(infos)) // the chunks' NUIDs
	var errs []error
	for _, info := range infos {
		named[info.NUID] = true
		if !info.ModTime.Before(cutoff) {
			continue
		}
		gone, err := s.removeOrphan(ctx, info.Name, cutoff)
		if gone {
			r.objects++
			r.bytes += int64(info.Size)
		}
		if err != nil {
			if ctx.Err() != nil {
				return r, why(ctx, err)
			}
			errs = append(errs, err)
		}
	}
	chunks := "$O." + s.bucket() + ".C."
	st, err := s.objStream.Info(ctx, jetstream.WithSubjectFilter(chunks+">"))
	if err != nil {
		return r, errors.Join(append(errs, fmt.Errorf("list the chunks: %w", why(ctx, err)))...)
	}
	for subject, count := range st.State.Subjects {
		if named[strings.TrimPrefix(subject, chunks)] {
			continue
		}
		m, err := s.objStream.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("read chunks %s: %w", subject, why(ctx, err)))
			continue
		case !m.Time.Before(cutoff):
			continue // an object being written, or one written after the list
		}
		if err := s.objStream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			errs = append(errs, fmt.Errorf("purge chunks %s: %w", subject, why(ctx, err)))
			continue
		}
		r.chunkSets++
		r.chunks += int(count)
	}
	return r, errors.Join(errs...)
}

// removeOrphan deletes object name, if its metadata is older than cutoff
// and no entry points to it, and reports whether it did.
func (s *Store) removeOrphan(ctx context.Context, name string, cutoff time.Time) (bool, error) {
	channel, id, ok := strings.Cut(name, ".")
	if !ok || !validToken(channel) || !validToken(id) {
		return false, nil // not an object of this package's: left alone
	}
	meta := "$O." + s.bucket() + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	m, err := s.objStream.GetLastMsgForSubject(ctx, meta)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read object %s: %w", name, err)
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil || info.Deleted || info.NUID == "" || !m.Time.Before(cutoff) {
		return false, nil
	}
	// After the metadata was read: an entry written since is seen.
	pointed, err := s.pointedTo(ctx, channel, id)
	if err != nil {
		return false, fmt.Errorf("look for the entry of object %s: %w", name, err)
	}
	if pointed {
		return false, nil
	}
	// Deleted as the Object Store deletes (a metadata marker, then the
	// chunks), but only if the metadata is still the one read.
	info.Deleted = true
	info.Size, info.Chunks, info.Digest, info.ModTime = 0, 0, "", time.Time{}
	data, err := json.Marshal(info)
	if err != nil {
		return false, err
	}
	dm := nats.NewMsg(meta)
	dm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	dm.Data = data
	if _, err := s.js.PublishMsg(ctx, dm, jetstream.WithExpectLastSequencePerSubject(m.Sequence)); err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return false, nil // written again, or removed by another instance, meanwhile
		}
		return false, fmt.Errorf("delete object %s: %w", name, err)
	}
	if err := s.objStream.Purge(ctx, jetstream.WithPurgeSubject("$O."+s.bucket()+".C."+info.NUID)); err != nil {
		// The next sweep purges them: no metadata names them now.
		return true, fmt.Errorf("purge the chunks of object %s: %w", name, err)
	}
	return true, nil
}

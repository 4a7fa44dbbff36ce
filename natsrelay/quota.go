package natsrelay

// The cluster's quotas (relay.Quota) and sweeps (relay.Sweeper).
//
//	KV devhook_usage   channel id → "<bytes> <deliveries>" queued for it
//
// A channel's bounds are kept in the usage bucket, shared by the
// instances: Enqueue reserves a delivery's bytes (its deliver frame) and
// one delivery with a compare-and-set of the channel's key before it
// writes the entry, and gives them back when the write fails or the id
// was queued already; Dequeue, Park and Expire give back what they
// removed, after removing it. A crash between the two steps leaves the
// count above what is queued, never below: a channel is refused early
// rather than let past its quota. The count of a channel whose queue is
// empty is reset by RemoveIdleChannels (every hour), which mends that.
//
// The bytes of all channels are bounded by JetStream: the queue stream's
// and the large deliveries' bucket's MaxBytes are Quota.TotalBytes, with
// DiscardNew. A publish refused by them is relay.ErrQueueFull; one
// refused for want of storage on the NATS servers (JetStream's
// "insufficient resources", or ENOSPC) relay.ErrStorageFull.
//
// Queued deliveries older than Quota.MaxAge are removed by Expire, not by
// a MaxAge of the stream, so that each is counted and logged: the stream
// is read from its first message, in the order of arrival, until one
// younger than the age; each older one is deleted by its sequence, so
// that of two instances expiring at once one counts it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook/relay"
)

var _ relay.Sweeper = (*Store)(nil)

// casTries bounds the compare-and-set attempts on one key; between two,
// casBackoff (retry.go).
const casTries = 32

type chanUsage struct {
	bytes int64
	n     int
}

func parseUsage(v []byte) chanUsage {
	b, n, _ := strings.Cut(string(v), " ")
	var u chanUsage
	u.bytes, _ = strconv.ParseInt(b, 10, 64)
	u.n, _ = strconv.Atoi(n)
	return u
}

func (u chanUsage) encode() []byte {
	return []byte(strconv.FormatInt(u.bytes, 10) + " " + strconv.Itoa(u.n))
}

// addUsage adds size bytes and n deliveries (negative to give back) to
// channel's count. With check, it refuses (relay.ErrChannelFull) what
// would pass the quota.
func (s *Store) addUsage(ctx context.Context, channel string, size int64, n int, check bool) error {
	if s.usage == nil {
		return nil // a Store of LookupStore, in a cluster of earlier relays
	}
	h := fnv.New32a()
	h.Write([]byte(channel))
	mu := &s.usageLocks[h.Sum32()%uint32(len(s.usageLocks))]
	mu.Lock()
	defer mu.Unlock()
	var err error
	b := casBackoff()
	for try := range casTries {
		var rev uint64
		var u chanUsage
		// First with the count this instance last wrote or read, which
		// is current unless another instance wrote since: one round trip.
		cached, ok := s.usageCache.get(channel)
		fromCache := try == 0 && ok
		if fromCache {
			rev, u = cached.rev, cached.u
		} else {
			e, gerr := s.usage.Get(ctx, channel)
			switch {
			case errors.Is(gerr, jetstream.ErrKeyNotFound):
			case gerr != nil:
				return fmt.Errorf("read the queue's usage of channel %s: %w", channel, why(ctx, gerr))
			default:
				rev, u = e.Revision(), parseUsage(e.Value())
			}
		}
		q := s.cfg.Quota
		if check && fromCache && (u.bytes+size > q.ChannelBytes || u.n+n > q.ChannelDeliveries) {
			// Refused only on the count as it is now.
			s.usageCache.drop(channel)
			continue
		}
		if check {
			switch {
			case u.bytes+size > q.ChannelBytes:
				return fmt.Errorf("%w: it holds %d bytes, the delivery takes %d, the quota is %d", relay.ErrChannelFull, u.bytes, size, q.ChannelBytes)
			case u.n+n > q.ChannelDeliveries:
				return fmt.Errorf("%w: it holds %d deliveries, the quota", relay.ErrChannelFull, u.n)
			}
		}
		u.bytes, u.n = max(0, u.bytes+size), max(0, u.n+n)
		if u.n == 0 {
			u.bytes = 0
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = s.usage.Create(ctx, channel, u.encode())
		} else {
			nrev, err = s.usage.Update(ctx, channel, u.encode(), rev)
		}
		if err == nil {
			s.usageCache.put(channel, usageRev{rev: nrev, u: u})
			return nil
		}
		s.usageCache.drop(channel)
		if !conflict(err) || ctx.Err() != nil {
			break // not another writer's doing: trying again would fail alike
		}
		if !fromCache && !sleep(ctx, b.next()) {
			break // another instance won on a fresh read: it is busy here
		}
	}
	return fmt.Errorf("update the queue's usage of channel %s: %w", channel, why(ctx, err))
}

// usageRev is a channel's count at a revision of its key.
type usageRev struct {
	rev uint64
	u   chanUsage
}

// usageCache is the count of each channel this instance last wrote: the
// revision to compare-and-set against first. Bounded by maxSeqs.
type usageCache struct {
	mu sync.Mutex
	m  map[string]usageRev
}

func (c *usageCache) get(channel string) (usageRev, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[channel]
	return r, ok
}

func (c *usageCache) put(channel string, r usageRev) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSeqs {
		c.m = make(map[string]usageRev)
	}
	c.m[channel] = r
}

func (c *usageCache) drop(channel string) {
	c.mu.Lock()
	delete(c.m, channel)
	c.mu.Unlock()
}

// release gives back what a removed entry counted, logging a failure: the
// count then stays above what is queued until RemoveIdleChannels mends it.
func (s *Store) release(ctx context.Context, channel string, size int64) {
	s.releaseN(ctx, channel, size, 1)
}

// releaseN counts n deliveries of size bytes in all out of channel's
// usage.
func (s *Store) releaseN(ctx context.Context, channel string, size int64, n int) {
	if err := s.addUsage(ctx, channel, -size, -n, false); err != nil {
		s.cfg.Logf("relay: channel %s: %v; the channel's quota counts it until its queue is empty", channel, err)
	}
}

// QueueUsage returns the bytes and deliveries queued for channel, as the
// quota counts them.
func (s *Store) QueueUsage(channel string) (bytes int64, deliveries int, err error) {
	ctx, cancel := s.ctx()
	defer cancel()
	if s.usage == nil {
		return 0, 0, nil
	}
	e, err := s.usage.Get(ctx, channel)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, why(ctx, err)
	}
	u := parseUsage(e.Value())
	return u.bytes, u.n, nil
}

// fullError wraps err, a failed write of the queue, in relay.ErrQueueFull
// or relay.ErrStorageFull when it says the queue or the storage is full.
func fullError(err error) error {
	if err == nil {
		return nil
	}
	var api *jetstream.APIError
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT),
		errors.As(err, &api) && api.ErrorCode == 10023, strings.Contains(msg, "insufficient resources"):
		return fmt.Errorf("%w: %w", relay.ErrStorageFull, err)
	case strings.Contains(msg, "maximum bytes exceeded"), strings.Contains(msg, "maximum messages exceeded"):
		return fmt.Errorf("%w: %w", relay.ErrQueueFull, err)
	}
	return err
}

// entrySize is what an entry counts for: its deliver frame.
func entrySize(m *jetstream.RawStreamMsg) int64 {
	if isObjectEntry(m.Header) {
		n, _ := strconv.ParseInt(m.Header.Get(hdrSize), 10, 64)
		return n
	}
	return int64(len(m.Data))
}

// channelOf is the channel of a queue entry's subject
// (<prefix>.queue.<channel>.<id>).
func (s *Store) channelOf(subject string) string {
	rest := strings.TrimPrefix(subject, s.cfg.Prefix+".queue.")
	ch, _, _ := strings.Cut(rest, ".")
	return ch
}

// expireBatch bounds the entries one Expire removes; the next sweep goes
// on.
const expireBatch = 10000

// Expire implements relay.Sweeper: the queued deliveries older than
// Quota.MaxAge, then, when due, the objects no entry points to
// (orphans.go).
func (s *Store) Expire(now time.Time) ([]relay.Expired, error) {
	expired, err := s.expire(now)
	s.sweepOrphans(now)
	return expired, err
}

func (s *Store) expire(now time.Time) ([]relay.Expired, error) {
	cutoff := now.Add(-s.cfg.Quota.MaxAge)
	byChannel := map[string]*relay.Expired{}
	var order []string
	out := func() []relay.Expired {
		res := make([]relay.Expired, 0, len(order))
		for _, ch := range order {
			res = append(res, *byChannel[ch])
		}
		return res
	}
	seq := uint64(1)
	for range expireBatch {
		ctx, cancel := s.ctx()
		m, err := s.queue.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.cfg.Prefix+".queue.>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			cancel()
			break
		}
		if err != nil {
			err = why(ctx, err)
			cancel()
			return out(), fmt.Errorf("natsrelay: drop expired deliveries: %w", err)
		}
		if !m.Time.Before(cutoff) {
			cancel()
			break // the entries that follow arrived later
		}
		seq = m.Sequence + 1
		err = s.queue.DeleteMsg(ctx, m.Sequence)
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) || strings.Contains(err.Error(), "no message found") {
				cancel()
				continue // removed meanwhile, by an ack or another instance
			}
			err = why(ctx, err)
			cancel()
			return out(), fmt.Errorf("natsrelay: drop expired delivery %s: %w", idOf(m.Subject), err)
		}
		channel, id := s.channelOf(m.Subject), idOf(m.Subject)
		s.forget(channel, id)
		size := entrySize(m)
		if err := s.deleteObjectOf(ctx, m.Header); err != nil {
			s.cfg.Logf("relay: channel %s: expired delivery %s dropped, but: %v (the sweep removes it)", channel, id, why(ctx, err))
		}
		s.release(ctx, channel, size)
		cancel()
		e := byChannel[channel]
		if e == nil {
			e = &relay.Expired{Channel: channel}
			byChannel[channel] = e
			order = append(order, channel)
		}
		e.Deliveries++
		e.Bytes += size
	}
	return out(), nil
}

// TouchChannel implements relay.Sweeper. A channel not found is not an
// error: it was removed.
func (s *Store) TouchChannel(id string, t time.Time) error {
	if !validToken(id) {
		return nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	var err error
	b := casBackoff()
	for range casTries {
		e, gerr := s.channels.Get(ctx, id)
		if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return nil
		}
		if gerr != nil {
			return fmt.Errorf("natsrelay: record that channel %s was opened: %w", id, why(ctx, gerr))
		}
		var ch relay.Channel
		if err := json.Unmarshal(e.Value(), &ch); err != nil {
			return fmt.Errorf("natsrelay: record that channel %s was opened: %w", id, err)
		}
		if !t.After(ch.LastOpened) {
			return nil
		}
		ch.LastOpened = t.UTC()
		v, merr := json.Marshal(ch)
		if merr != nil {
			return merr
		}
		if _, err = s.channels.Update(ctx, id, v, e.Revision()); err == nil {
			return nil
		}
		if !conflict(err) || ctx.Err() != nil || !sleep(ctx, b.next()) {
			break
		}
	}
	return fmt.Errorf("natsrelay: record that channel %s was opened: %w", id, why(ctx, err))
}

// RemoveIdleChannels implements relay.Sweeper: the channels idle since
// before go (their key deleted only if unchanged since it was read, so
// that a channel opened meanwhile stays), unless inUse says an agent
// holds them, with their queued and parked deliveries and large objects;
// so do the queues of channels that are gone. The usage count of a
// channel whose queue is empty is reset.
func (s *Store) RemoveIdleChannels(before time.Time, inUse func(channel string) bool) ([]relay.RemovedChannel, error) {
	ctx, cancel, err := s.link.ctx(context.Background(), 10*s.cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: remove idle channels: %w", err)
	}
	defer cancel()
	keys, err := s.channels.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("natsrelay: remove idle channels: list channels: %w", err)
	}
	exists := make(map[string]bool, len(keys))
	var out []relay.RemovedChannel
	for _, k := range keys {
		e, err := s.channels.Get(ctx, k)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				exists[k] = true // not known to be gone: kept
			}
			continue
		}
		exists[k] = true
		var ch relay.Channel
		if json.Unmarshal(e.Value(), &ch) != nil || !ch.IdleSince(before) || (inUse != nil && inUse(k)) {
			continue
		}
		if err := s.channels.Delete(ctx, k, jetstream.LastRevision(e.Revision())); err != nil {
			continue // opened meanwhile, or NATS away: the next sweep sees
		}
		delete(exists, k)
		last := ch.LastOpened
		if last.IsZero() {
			last = ch.CreatedAt
		}
		out = append(out, relay.RemovedChannel{ID: k, LastOpened: last})
	}
	var ukeys []string
	if s.usage != nil {
		ukeys, err = s.usage.Keys(ctx)
	}
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, fmt.Errorf("natsrelay: remove idle channels: list usage: %w", err)
	}
	removed := make(map[string]bool, len(out))
	for _, rc := range out {
		removed[rc.ID] = true
	}
	for _, k := range ukeys {
		if exists[k] || removed[k] {
			continue
		}
		// Keys may miss a key updated while it lists (a channel touched
		// meanwhile): a queue is left behind only if its channel is gone.
		if _, err := s.channels.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		out = append(out, relay.RemovedChannel{ID: k}) // queued as its channel went
		removed[k] = true
	}
	var errs []error
	for i := range out {
		if err := s.removeQueue(ctx, &out[i]); err != nil {
			errs = append(errs, err)
		}
	}
	// Mend counts left above an empty queue by a crash.
	for _, k := range ukeys {
		if removed[k] {
			continue
		}
		if n, err := s.QueueLen(k); err == nil && n == 0 {
			if e, err := s.usage.Get(ctx, k); err == nil {
				s.usageCache.drop(k)
				s.usage.Delete(ctx, k, jetstream.LastRevision(e.Revision()))
			}
		}
	}
	return out, errors.Join(errs...)
}

// removeQueue removes the queued and parked deliveries of removed channel
// rc, their objects and its usage count, counting them in rc.
func (s *Store) removeQueue(ctx context.Context, rc *relay.RemovedChannel) error {
	for _, st := range []jetstream.Stream{s.queue, s.parked} {
		kind := "queue"
		if st == s.parked {
			kind = "parked"
		}
		filter := s.cfg.Prefix + "." + kind + "." + rc.ID + ".*"
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return fmt.Errorf("natsrelay: remove the %s of channel %s: %w", kind, rc.ID, err)
		}
		rc.Deliveries += len(info.State.Subjects)
		if len(info.State.Subjects) == 0 {
			continue
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
			return fmt.Errorf("natsrelay: remove the %s of channel %s: %w", kind, rc.ID, err)
		}
	}
	if s.usage == nil {
		// A Store of LookupStore: no counts.
	} else if e, err := s.usage.Get(ctx, rc.ID); err == nil {
		rc.Bytes = parseUsage(e.Value()).bytes
		s.usageCache.drop(rc.ID)
		if err := s.usage.Delete(ctx, rc.ID); err != nil {
			s.cfg.Logf("relay: channel %s removed, but its usage count stays: %v", rc.ID, err)
		}
	}
	objs, err := s.objects.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("natsrelay: remove the large deliveries of channel %s: %w", rc.ID, err)
	}
	for _, o := range objs {
		if strings.HasPrefix(o.Name, rc.ID+".") {
			if err := s.objects.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				s.cfg.Logf("relay: channel %s removed, but not its object %s: %v (the sweep removes it)", rc.ID, o.Name, err)
			}
		}
	}
	return nil
}

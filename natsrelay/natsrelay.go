// Package natsrelay is the relay's cluster implementation over NATS: a
// relay.Store whose channels and queue live in JetStream, and a
// relay.Router that reaches the agent holding a channel on whichever relay
// instance it is connected to. Relay instances given the same NATS
// servers share channels, tokens and queues; the relay.Server code is the
// same as for the single-process relay (boltrelay.Store, relay.Hub).
// Any NATS server with JetStream will do, at its defaults: a delivery
// larger than one NATS message (max_payload, 1 MiB by default) goes in
// parts.
//
// # Layout in NATS (prefix "devhook", settable)
//
//	KV devhook_channels           channel id → relay.Channel as JSON (token hash, created)
//	KV devhook_agents             channel id → "<instance>/<attach>" of the newest agent
//	stream DEVHOOK_QUEUE          devhook.queue.<channel>.<delivery id>: a queued
//	                              delivery as a deliver frame (wire.EncodeDelivery),
//	                              or, larger than a message, pointing to its object
//	                              (entries.go), its run in a Devhook-Run header
//	                              (runs.go); file storage, bounded by
//	                              Quota.TotalBytes (discard new: a full queue
//	                              refuses, the sender gets 503), one message per
//	                              subject, deduplicated by delivery id; entries
//	                              older than Quota.MaxAge removed by Expire
//	KV devhook_usage              channel id → bytes and deliveries queued for
//	                              it, against Quota (quota.go)
//	stream DEVHOOK_PARKED         devhook.parked.<channel>.<delivery id>: deliveries
//	                              that can never be sent, with a Devhook-Reason
//	                              header; entries as in the queue
//	objects devhook_large         <channel>.<delivery id>: the deliver frame of a
//	                              queued or parked delivery too large for one
//	                              message, in chunks; written before its entry,
//	                              deleted after it (or when the entry is refused);
//	                              those a crash left behind removed by the sweep
//	                              after Config.OrphanGrace (orphans.go), TTL
//	                              Quota.MaxAge + 1 h; bounded by Quota.TotalBytes
//	devhook.agent.<channel>.deliver  request/reply: a live delivery for the agent
//	                              of channel, answered by the instance holding it
//	                              (queue group: one instance answers); larger than
//	                              a message, the delivery and the answer go in
//	                              parts on per-delivery inboxes (parts.go)
//	devhook.agent.<channel>.kick  the channel's queue has new deliveries (with
//	                              KickRun, the delivery and its run in headers)
//
// A live delivery arriving at instance B for an agent on instance A is a
// NATS request from B to A; A hands it to the agent and replies with the
// agent's answer, which B passes to the sender. No responders means no
// agent anywhere: B queues the delivery (202). The newest agent wins across
// instances: Attach writes the agents KV entry, and every instance watches
// the bucket; an instance whose local agent holds an older revision than a
// newer entry of another agent replaces it (close code 4001).
//
// A queued delivery is removed from the stream (purged by subject), and
// then its object if it has one, when the agent holding the channel
// acknowledges it, exactly as with the bbolt store; the instance the agent
// is connected to reads and sends the queue.
//
// While the connection to NATS is lost, calls that need it fail within
// Config.LostWait of the loss (link.go): the sender of a delivery that
// needs NATS gets 503 with Retry-After rather than wait for timeouts.
package natsrelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// Defaults of Config.
const (
	DefaultPrefix   = "devhook"
	DefaultTimeout  = 10 * time.Second
	DefaultLostWait = time.Second
)

// Config configures OpenStore and OpenRouter. Zero values mean defaults.
type Config struct {
	// Conn is the connection to NATS, with JetStream enabled on the
	// servers. Required; the caller closes it after the Store and Router.
	Conn *nats.Conn
	// Prefix names the subjects, streams and buckets, so that several
	// relay clusters can share NATS servers.
	Prefix string
	// Replicas of the streams and buckets (1, or 3 on a NATS cluster of
	// three servers or more).
	Replicas int
	// Quota bounds the queue, as for every relay.Store (quota.go):
	// ChannelBytes and ChannelDeliveries in the usage bucket, TotalBytes
	// as the queue stream's and the large deliveries' bucket's MaxBytes,
	// MaxAge by Expire.
	Quota relay.Quota
	// WriteError, when set, is called before each queue entry is written,
	// and an error it returns fails the write as JetStream would: tests
	// make the storage full with it (syscall.ENOSPC).
	WriteError func() error
	// MaxBody is the relay's largest body: deliveries and answers up to
	// that size, with their heads, are taken from other instances.
	MaxBody int64
	// ResponseTimeout is the relay's wait for an agent's answer; a request
	// to another instance waits that long and a little more.
	ResponseTimeout time.Duration
	// Timeout bounds each call to JetStream, and the wait for each part
	// of a delivery or answer passed between instances in parts.
	Timeout time.Duration
	// LostWait bounds how long a call that needs NATS waits for a lost
	// connection to come back, counted from the loss; after, such calls
	// fail at once (the sender gets 503 and Retry-After). See link.go.
	LostWait time.Duration
	// OrphanGrace is how old an object of a large delivery that no entry
	// points to must be before the sweep removes it (orphans.go): longer
	// than a writer takes between the object and its entry. Default
	// DefaultOrphanGrace.
	OrphanGrace time.Duration
	Logf        func(format string, args ...any)
}

func (c *Config) setDefaults() error {
	if c.Conn == nil {
		return errors.New("natsrelay: Config.Conn is required")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !validToken(c.Prefix) {
		return fmt.Errorf("natsrelay: prefix %q must be one subject token (letters, digits, - and _)", c.Prefix)
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	q, err := c.Quota.WithDefaults()
	if err != nil {
		return fmt.Errorf("natsrelay: %w", err)
	}
	c.Quota = q
	if c.MaxBody <= 0 {
		c.MaxBody = wire.DefaultMaxBody
	}
	if c.ResponseTimeout <= 0 {
		c.ResponseTimeout = relay.DefaultResponseTimeout
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.LostWait <= 0 {
		c.LostWait = DefaultLostWait
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	// Larger deliveries go in parts of max_payload less headroom; below
	// this, parts would be mostly headers.
	if mp := c.Conn.MaxPayload(); mp < MinMaxPayload {
		return fmt.Errorf("natsrelay: the NATS server's max_payload is %d bytes, below the relay's minimum of %d: raise it in the NATS server's configuration (its default, 1MB, will do)",
			mp, MinMaxPayload)
	}
	return nil
}

// maxFrame is the largest deliver or answer frame the relay makes.
func (c *Config) maxFrame() int64 { return c.MaxBody + wire.MaxHeaderSize + 4<<10 }

func (c *Config) upper() string { return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_")) }

// validToken reports whether s can be one token of a NATS subject and a
// KV key: channel ids (hex) and delivery ids (UUIDs) are.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Store is the cluster's relay.Store: channels in a JetStream KV bucket,
// the queue in a JetStream stream, large deliveries in an object bucket.
type Store struct {
	cfg       Config
	link      *link
	js        jetstream.JetStream
	channels  jetstream.KeyValue
	queue     jetstream.Stream
	parked    jetstream.Stream
	objects   jetstream.ObjectStore
	objStream jetstream.Stream   // the stream under objects, for the sweep of orphans
	usage     jetstream.KeyValue // nil in a Store of LookupStore on a cluster of earlier relays
	orphans   orphanSweep

	// Tests only (export_test.go): called before each part of an
	// object is read to be written, and before an entry is written.
	beforePart  func(written int)
	beforeEntry func(object string)
	// Tests only: called by QueuedRuns once its consumer is made.
	beforeRunsFetch func()

	// usageLocks serialize this instance's updates of a channel's usage
	// count (by a hash of the channel), so that its own concurrent
	// senders do not fail each other's compare-and-set.
	usageLocks [64]sync.Mutex
	usageCache usageCache

	mu   sync.Mutex
	seqs map[string]queued // channel/id → where Queued found it
}

// queued is where Queued found a delivery.
type queued struct {
	seq    uint64 // its entry's stream sequence
	object bool   // the entry points to an object
	size   int64  // what it counts for in the quota (entrySize)
}

var (
	_ relay.Store         = (*Store)(nil)
	_ relay.Counter       = (*Store)(nil)
	_ relay.HealthChecker = (*Store)(nil)
	_ relay.QueueCounter  = (*Store)(nil)
	_ relay.ArrivalOrder  = (*Store)(nil)
)

// OpenStore creates or updates the streams and bucket, and returns the
// Store.
func OpenStore(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: %w", err)
	}
	s := &Store{cfg: cfg, js: js, seqs: make(map[string]queued)}
	s.orphans.init()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	s.channels, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Prefix + "_channels", Description: "devhook relay channels", History: 1,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, jsError("create the channels bucket", err)
	}
	s.usage, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Prefix + "_usage", Description: "devhook relay: bytes and deliveries queued per channel", History: 1,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, jsError("create the usage bucket", err)
	}
	// Entries are at most one message (max_payload): the streams need
	// no MaxMsgSize of their own.
	s.queue, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: cfg.upper() + "_QUEUE", Description: "devhook relay: deliveries waiting for their agent",
		Subjects: []string{cfg.Prefix + ".queue.>"}, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		// No MaxAge: Expire drops old entries, and counts them.
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew, MaxBytes: cfg.Quota.TotalBytes,
		MaxMsgsPerSubject: 1, Duplicates: min(2*time.Minute, cfg.Quota.MaxAge),
	})
	if err != nil {
		return nil, jsError("create the queue stream", err)
	}
	s.parked, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: cfg.upper() + "_PARKED", Description: "devhook relay: deliveries that can never be sent to their agent",
		Subjects: []string{cfg.Prefix + ".parked.>"}, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
		MaxAge: cfg.Quota.MaxAge, MaxBytes: max(cfg.Quota.TotalBytes/8, 64<<20),
	})
	if err != nil {
		return nil, jsError("create the parked stream", err)
	}
	s.objects, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: cfg.Prefix + "_large", Description: "devhook relay: queued and parked deliveries too large for one NATS message",
		TTL: objectTTL(cfg.Quota.MaxAge), MaxBytes: cfg.Quota.TotalBytes, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, jsError("create the bucket of large deliveries", err)
	}
	if s.objStream, err = js.Stream(ctx, "OBJ_"+s.bucket()); err != nil {
		return nil, jsError("find the stream of the bucket of large deliveries", err)
	}
	s.link = newLink(cfg.Conn, cfg.LostWait, nil)
	return s, nil
}

func jsError(what string, err error) error {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return fmt.Errorf("natsrelay: %s: %w: start nats-server with -js (JetStream)", what, err)
	}
	return fmt.Errorf("natsrelay: %s: %w", what, err)
}

// ctx is the context of a call to JetStream: Timeout, bounded by the
// link. While NATS is away it is canceled already (its cause wraps
// ErrNATSAway), and calls made with it fail before sending anything.
func (s *Store) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel, err := s.link.ctx(context.Background(), s.cfg.Timeout)
	if err != nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(err)
		return ctx, func() {}
	}
	return ctx, cancel
}

func (s *Store) queueSubject(channel, id string) string {
	return s.cfg.Prefix + ".queue." + channel + "." + id
}

// PutChannel implements relay.Store.
func (s *Store) PutChannel(ch relay.Channel) error {
	if !validToken(ch.ID) {
		return devhook.Errorf(devhook.EINVALID, "natsrelay: invalid channel id %q", ch.ID)
	}
	v, err := json.Marshal(ch)
	if err != nil {
		return fmt.Errorf("natsrelay: put channel %s: %w", ch.ID, err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if _, err := s.channels.Put(ctx, ch.ID, v); err != nil {
		return fmt.Errorf("natsrelay: put channel %s: %w", ch.ID, why(ctx, err))
	}
	return nil
}

// Channel implements relay.Store.
func (s *Store) Channel(id string) (relay.Channel, error) {
	notFound := devhook.Errorf(devhook.ENOTFOUND, "channel %.200q not found", id)
	if !validToken(id) {
		return relay.Channel{}, notFound
	}
	ctx, cancel := s.ctx()
	defer cancel()
	e, err := s.channels.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return relay.Channel{}, notFound
	case err != nil:
		return relay.Channel{}, fmt.Errorf("natsrelay: read channel %s: %w", id, why(ctx, err))
	}
	var ch relay.Channel
	if err := json.Unmarshal(e.Value(), &ch); err != nil {
		return relay.Channel{}, fmt.Errorf("natsrelay: read channel %s: %w", id, err)
	}
	return ch, nil
}

// Enqueue implements relay.Store: it returns once JetStream has stored the
// delivery (on a quorum of its replicas), its object first if it has one
// (entries.go).
func (s *Store) Enqueue(channel string, d *devhook.Delivery) error {
	if !validToken(channel) || d == nil || !validToken(d.ID) {
		return devhook.Errorf(devhook.EINVALID, "natsrelay: enqueue: invalid channel or delivery")
	}
	frame, err := wire.EncodeDelivery(d)
	if err != nil {
		return fmt.Errorf("natsrelay: enqueue delivery %s: %w", d.ID, err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	size := int64(len(frame))
	subject := s.queueSubject(channel, d.ID)
	if len(frame) > partSize(s.cfg.Conn) {
		// Queued already: kept once, its object not written again
		// unless it is missing (deleted after a publish that failed,
		// but was stored after all).
		m, err := s.queue.GetLastMsgForSubject(ctx, subject)
		if err == nil {
			return s.mendObject(ctx, channel, d.ID, m, frame)
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("natsrelay: enqueue delivery %s for channel %s: %w", d.ID, channel, why(ctx, err))
		}
	}
	if err := s.addUsage(ctx, channel, size, 1, true); err != nil {
		if errors.Is(err, relay.ErrChannelFull) {
			if _, gerr := s.queue.GetLastMsgForSubject(ctx, subject); gerr == nil {
				return nil // kept once: a full queue refuses only new deliveries
			}
		}
		return fmt.Errorf("natsrelay: enqueue delivery %s for channel %s: %w", d.ID, channel, err)
	}
	var ack *jetstream.PubAck
	if s.cfg.WriteError != nil {
		err = s.cfg.WriteError()
	}
	if err == nil {
		ack, err = s.writeEntry(ctx, subject, channel, d.ID, frame, runHeader(d.Body),
			jetstream.WithMsgID(d.ID), jetstream.WithExpectStream(s.cfg.upper()+"_QUEUE"))
	}
	if err != nil || ack.Duplicate {
		// Not queued, or queued already: not counted twice. In a
		// fresh context: a write that timed out used all of ctx.
		rctx, rcancel := s.ctx()
		s.release(rctx, channel, size)
		rcancel()
	}
	if err != nil {
		return fmt.Errorf("natsrelay: enqueue delivery %s for channel %s: %w", d.ID, channel, fullError(why(ctx, err)))
	}
	return nil
}

// Queued implements relay.Store. Deliveries come in the order they were
// queued (the stream's), which is id order up to the clocks of the relay
// instances; after must be an id Queued returned, or "".
func (s *Store) Queued(channel string, after string, limit int) ([]*devhook.Delivery, error) {
	if !validToken(channel) {
		return nil, devhook.Errorf(devhook.EINVALID, "natsrelay: invalid channel id %q", channel)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	start := uint64(1)
	if after != "" {
		start = s.seqAfter(ctx, channel, after)
	}
	filter := s.cfg.Prefix + ".queue." + channel + ".*"
	var out []*devhook.Delivery
	for limit <= 0 || len(out) < limit {
		m, err := s.queue.GetMsg(ctx, start, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("natsrelay: read queue of channel %s: %w", channel, why(ctx, err))
		}
		start = m.Sequence + 1
		s.remember(channel, idOf(m.Subject), queued{seq: m.Sequence, object: isObjectEntry(m.Header), size: entrySize(m)})
		d, err := s.readEntry(ctx, channel, m)
		if err != nil {
			return out, fmt.Errorf("natsrelay: read queue of channel %s: %w", channel, why(ctx, err))
		}
		d.Queued = true
		out = append(out, d)
	}
	return out, nil
}

// QueuedInArrivalOrder implements relay.ArrivalOrder: the queue is a
// stream, a delivery queued later comes after those read, and the
// relay's drain reads on from where it stopped when one is queued.
func (s *Store) QueuedInArrivalOrder() {}

// maxSeqs bounds the sequences a Store remembers.
const maxSeqs = 1 << 16

func (s *Store) remember(channel, id string, q queued) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seqs) >= maxSeqs {
		// Entries of deliveries acknowledged through other
		// instances are never forgotten here: start afresh. A
		// miss costs one lookup in the stream.
		clear(s.seqs)
	}
	s.seqs[channel+"/"+id] = q
}

// seqAfter is the stream sequence to read from after delivery id.
func (s *Store) seqAfter(ctx context.Context, channel, id string) uint64 {
	s.mu.Lock()
	q, ok := s.seqs[channel+"/"+id]
	s.mu.Unlock()
	if ok {
		return q.seq + 1
	}
	if m, err := s.queue.GetLastMsgForSubject(ctx, s.queueSubject(channel, id)); err == nil {
		return m.Sequence + 1
	}
	// Gone and forgotten: from the start. The relay skips what it has
	// sent on this connection already.
	return 1
}

func (s *Store) forget(channel, id string) {
	s.mu.Lock()
	delete(s.seqs, channel+"/"+id)
	s.mu.Unlock()
}

// Dequeue implements relay.Store: for each delivery, the entry, then its
// object if it has one. JetStream removes one subject a request, so the
// removals of a batch are sent together (dequeueAtOnce at a time) and
// take about one round trip, not one per delivery; the channel's usage is
// counted down once for all those removed. On an error, those removed
// stay removed (and counted down): the relay tries the batch again, and
// the ids no longer queued are skipped.
func (s *Store) Dequeue(channel string, ids ...string) error {
	if !validToken(channel) {
		return devhook.Errorf(devhook.EINVALID, "natsrelay: dequeue: invalid channel id")
	}
	for _, id := range ids {
		if !validToken(id) {
			return devhook.Errorf(devhook.EINVALID, "natsrelay: dequeue: invalid delivery id")
		}
	}
	ctx, cancel := s.ctx()
	defer cancel()
	var (
		mu    sync.Mutex
		size  int64
		n     int
		first error
		wg    sync.WaitGroup
		slots = make(chan struct{}, dequeueAtOnce)
	)
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			sz, removed, err := s.dequeueOne(ctx, channel, id)
			mu.Lock()
			defer mu.Unlock()
			if removed {
				size += sz
				n++
			}
			if err != nil && first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	if n > 0 {
		s.releaseN(ctx, channel, size, n)
	}
	return first
}

// dequeueAtOnce bounds the removals of one Dequeue in flight at once.
const dequeueAtOnce = 32

// dequeueOne removes delivery id's entry, then its object if it has one.
// It returns what the entry counted for in the quota, and whether it was
// removed (false: it was not queued, or the removal failed).
func (s *Store) dequeueOne(ctx context.Context, channel, id string) (size int64, removed bool, err error) {
	s.mu.Lock()
	q, ok := s.seqs[channel+"/"+id]
	s.mu.Unlock()
	if !ok {
		// Not read through this Store: the entry says whether it has
		// an object.
		m, err := s.queue.GetLastMsgForSubject(ctx, s.queueSubject(channel, id))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return 0, false, nil
		case err != nil:
			return 0, false, fmt.Errorf("natsrelay: dequeue delivery %s of channel %s: %w", id, channel, why(ctx, err))
		}
		q.object, q.size = isObjectEntry(m.Header), entrySize(m)
	}
	if err := s.removeEntry(ctx, channel, id); err != nil {
		return 0, false, err
	}
	if q.object {
		h := nats.Header{hdrObject: {objectName(channel, id)}}
		if err := s.deleteObjectOf(ctx, h); err != nil {
			// Dequeued all the same: nothing points to the object.
			s.cfg.Logf("relay: channel %s: delivery %s dequeued, but: %v (the sweep removes it)", channel, id, why(ctx, err))
		}
	}
	return q.size, true, nil
}

// removeEntry removes delivery id's entry from channel's queue, leaving
// its object.
func (s *Store) removeEntry(ctx context.Context, channel, id string) error {
	if err := s.queue.Purge(ctx, jetstream.WithPurgeSubject(s.queueSubject(channel, id))); err != nil {
		return fmt.Errorf("natsrelay: dequeue delivery %s of channel %s: %w", id, channel, why(ctx, err))
	}
	s.forget(channel, id)
	return nil
}

// Park implements relay.Store: the delivery goes to the parked stream,
// with the reason in its Devhook-Reason header, its object (if it has
// one) kept for it.
func (s *Store) Park(channel, id, reason string) error {
	if !validToken(channel) || !validToken(id) {
		return devhook.Errorf(devhook.EINVALID, "natsrelay: park: invalid channel or delivery id")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	m, err := s.queue.GetLastMsgForSubject(ctx, s.queueSubject(channel, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("natsrelay: park delivery %s of channel %s: %w", id, channel, why(ctx, err))
	}
	reason = strings.ToValidUTF8(strings.ReplaceAll(reason, "\n", " "), "?")
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason-3], "") + "..."
	}
	hdr := nats.Header{hdrReason: {reason}}
	err = s.copyEntry(ctx, m, s.cfg.Prefix+".parked."+channel+"."+id, channel, id, hdr, jetstream.WithExpectStream(s.cfg.upper()+"_PARKED"))
	if err != nil {
		return fmt.Errorf("natsrelay: park delivery %s of channel %s: %w", id, channel, why(ctx, err))
	}
	if err := s.removeEntry(ctx, channel, id); err != nil {
		return err
	}
	s.release(ctx, channel, entrySize(m))
	return nil
}

// Parked returns the parked deliveries of channel: id → reason.
func (s *Store) Parked(channel string) (map[string]string, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	msgs, err := s.parkedMsgs(ctx, channel)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: read parked deliveries of channel %s: %w", channel, err)
	}
	out := make(map[string]string, len(msgs))
	for _, pm := range msgs {
		out[pm.id] = pm.reason
	}
	return out, nil
}

// Counts implements relay.Counter: over the whole cluster.
func (s *Store) Counts() (relay.Counts, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	st, err := s.channels.Status(ctx)
	if err != nil {
		return relay.Counts{}, fmt.Errorf("natsrelay: count channels: %w", err)
	}
	info, err := s.queue.Info(ctx)
	if err != nil {
		return relay.Counts{}, fmt.Errorf("natsrelay: count queue: %w", err)
	}
	parked, err := s.parkedCount(ctx)
	if err != nil {
		return relay.Counts{}, fmt.Errorf("natsrelay: count parked deliveries: %w", err)
	}
	return relay.Counts{Channels: int(st.Values()), Queued: int(info.State.Msgs), Parked: parked}, nil
}

// QueueLen returns the number of deliveries in channel's queue.
func (s *Store) QueueLen(channel string) (int, error) {
	if !validToken(channel) {
		return 0, devhook.Errorf(devhook.EINVALID, "natsrelay: invalid channel id %q", channel)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	// One message per subject: the subjects are the deliveries.
	info, err := s.queue.Info(ctx, jetstream.WithSubjectFilter(s.cfg.Prefix+".queue."+channel+".*"))
	if err != nil {
		return 0, fmt.Errorf("natsrelay: count queue of channel %s: %w", channel, err)
	}
	return len(info.State.Subjects), nil
}

// Health implements relay.HealthChecker: the NATS connection's state.
func (s *Store) Health() (string, error) {
	nc := s.cfg.Conn
	if st := nc.Status(); st != nats.CONNECTED {
		err := fmt.Errorf("nats: %s", strings.ToLower(st.String()))
		if last := nc.LastError(); last != nil {
			err = fmt.Errorf("%w (%w)", err, last)
		}
		return "", fmt.Errorf("%w: deliveries can be neither queued nor routed to other relays", err)
	}
	return fmt.Sprintf("nats: connected to %s (%d servers known)", nc.ConnectedUrlRedacted(), len(nc.Servers())), nil
}

package natsrelay

// Parked deliveries of the cluster: the stream DEVHOOK_PARKED holds one
// entry a delivery, devhook.parked.<channel>.<delivery id>, as the queue
// holds it (entries.go: the deliver frame, or a pointer to its object in
// devhook_large), with a Devhook-Reason header saying why it can never be
// sent; the message's time is when it was parked.
// ListParked, ParkedDelivery, Requeue and DropParked serve devhook relay
// parked --nats, through LookupStore, which changes nothing in NATS.
//
// Parked messages are read through parkedMsgs and parkedMsg, and their
// deliveries through readEntry; a requeue is copyEntry, as parking is.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
)

// LookupStore returns the Store of a cluster whose relays created its
// streams and bucket, without creating or changing anything: for a
// command run beside the relays. Of cfg, Conn, Prefix, Timeout, LostWait
// and Logf matter.
func LookupStore(ctx context.Context, cfg Config) (*Store, error) {
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
	missing := func(what string, err error) error {
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("natsrelay: no relay cluster with prefix %q on this NATS (%s not found): check --nats-prefix, or start a relay with --nats first", cfg.Prefix, what)
		}
		return jsError("find "+what, err)
	}
	if s.channels, err = js.KeyValue(ctx, cfg.Prefix+"_channels"); err != nil {
		return nil, missing("bucket "+cfg.Prefix+"_channels", err)
	}
	if s.queue, err = js.Stream(ctx, cfg.upper()+"_QUEUE"); err != nil {
		return nil, missing("stream "+cfg.upper()+"_QUEUE", err)
	}
	if s.parked, err = js.Stream(ctx, cfg.upper()+"_PARKED"); err != nil {
		return nil, missing("stream "+cfg.upper()+"_PARKED", err)
	}
	if s.objects, err = js.ObjectStore(ctx, cfg.Prefix+"_large"); err != nil {
		return nil, missing("bucket "+cfg.Prefix+"_large", err)
	}
	if s.objStream, err = js.Stream(ctx, "OBJ_"+s.bucket()); err != nil {
		return nil, missing("stream OBJ_"+s.bucket(), err)
	}
	if s.usage, err = js.KeyValue(ctx, cfg.Prefix+"_usage"); err != nil {
		s.usage = nil // a cluster of earlier relays: no counts to keep
	}
	s.link = newLink(cfg.Conn, cfg.LostWait, nil)
	return s, nil
}

// parkedMsg is one parked delivery as the stream holds it.
type parkedMsg struct {
	channel, id string
	reason      string
	at          time.Time               // parked
	m           *jetstream.RawStreamMsg // the entry
}

func (s *Store) parkedSubject(channel, id string) string {
	return s.cfg.Prefix + ".parked." + channel + "." + id
}

// parkedOf makes a parkedMsg of a message of the parked stream.
func parkedOf(m *jetstream.RawStreamMsg) parkedMsg {
	// <prefix>.parked.<channel>.<id>
	parts := strings.Split(m.Subject, ".")
	pm := parkedMsg{reason: m.Header.Get(hdrReason), at: m.Time.UTC(), m: m}
	if len(parts) >= 4 {
		pm.channel, pm.id = parts[len(parts)-2], parts[len(parts)-1]
	}
	return pm
}

// parkedMsgs returns the parked messages of channel ("" = every channel),
// in the order they were parked; a delivery parked twice is there once,
// as last parked.
func (s *Store) parkedMsgs(ctx context.Context, channel string) ([]parkedMsg, error) {
	filter := s.cfg.Prefix + ".parked.>"
	if channel != "" {
		filter = s.cfg.Prefix + ".parked." + channel + ".*"
	}
	var out []parkedMsg
	at := map[string]int{} // channel/id → index in out
	for seq := uint64(1); ; {
		m, err := s.parked.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		seq = m.Sequence + 1
		pm := parkedOf(m)
		if i, ok := at[pm.channel+"/"+pm.id]; ok {
			out[i] = pm
			continue
		}
		at[pm.channel+"/"+pm.id] = len(out)
		out = append(out, pm)
	}
}

// parkedMsg returns the parked message of delivery id, whatever its
// channel, or an error with code devhook.ENOTFOUND.
func (s *Store) parkedMsg(ctx context.Context, id string) (parkedMsg, error) {
	var found *parkedMsg
	for seq := uint64(1); ; {
		m, err := s.parked.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.cfg.Prefix+".parked.*."+id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return parkedMsg{}, err
		}
		seq = m.Sequence + 1
		pm := parkedOf(m)
		found = &pm // the last, if parked twice
	}
	if found == nil {
		return parkedMsg{}, devhook.Errorf(devhook.ENOTFOUND, "no parked delivery %.200q", id)
	}
	return *found, nil
}

// putQueued puts the entry of parked delivery pm back at the end of its
// channel's queue (its object, if it has one, written again first). It
// is not deduplicated by id as Enqueue is: the delivery may have been
// queued within the stream's duplicate window.
func (s *Store) putQueued(ctx context.Context, pm *parkedMsg) error {
	err := s.copyEntry(ctx, pm.m, s.queueSubject(pm.channel, pm.id), pm.channel, pm.id, nil,
		jetstream.WithExpectStream(s.cfg.upper()+"_QUEUE"))
	if err != nil {
		return err
	}
	// The operator's choice: it may take the channel over its quota.
	if err := s.addUsage(ctx, pm.channel, entrySize(pm.m), 1, false); err != nil {
		s.cfg.Logf("relay: channel %s: delivery %s requeued, but not counted in its quota: %v", pm.channel, pm.id, err)
	}
	return nil
}

// deleteParked removes the parked delivery id of channel.
func (s *Store) deleteParked(ctx context.Context, channel, id string) error {
	return s.parked.Purge(ctx, jetstream.WithPurgeSubject(s.parkedSubject(channel, id)))
}

// parkedCount counts the parked deliveries of every channel.
func (s *Store) parkedCount(ctx context.Context) (int, error) {
	info, err := s.parked.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

// parked makes a relay.Parked of pm, with the delivery's body when body
// is set. A delivery that cannot be read (its object gone) has Size -1.
func (s *Store) parkedOf(ctx context.Context, pm *parkedMsg, body bool) relay.Parked {
	p := relay.Parked{Channel: pm.channel, ID: pm.id, Reason: pm.reason, ParkedAt: pm.at,
		ReceivedAt: relay.IDTime(pm.id), Size: -1}
	d, err := s.readEntry(ctx, pm.channel, pm.m)
	if err != nil {
		return p
	}
	p.Size = len(d.Body)
	if !body {
		d.Body = nil
	}
	p.Delivery = d
	if !d.ReceivedAt.IsZero() {
		p.ReceivedAt = d.ReceivedAt
	}
	return p
}

// ListParked returns the parked deliveries of channel, or of every
// channel when channel is "", in the order they were parked, without
// their bodies.
func (s *Store) ListParked(channel string) ([]relay.Parked, error) {
	if channel != "" && !validToken(channel) {
		return nil, devhook.Errorf(devhook.EINVALID, "natsrelay: invalid channel id %q", channel)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	msgs, err := s.parkedMsgs(ctx, channel)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: read parked deliveries: %w", err)
	}
	out := make([]relay.Parked, len(msgs))
	for i := range msgs {
		out[i] = s.parkedOf(ctx, &msgs[i], false)
	}
	return out, nil
}

// ParkedDelivery returns parked delivery id, body included, or an error
// with code devhook.ENOTFOUND.
func (s *Store) ParkedDelivery(id string) (relay.Parked, error) {
	if !validToken(id) {
		return relay.Parked{}, devhook.Errorf(devhook.ENOTFOUND, "no parked delivery %.200q", id)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	pm, err := s.parkedMsg(ctx, id)
	if err != nil {
		return relay.Parked{}, fmt.Errorf("natsrelay: read parked delivery %s: %w", id, err)
	}
	return s.parkedOf(ctx, &pm, true), nil
}

// Requeue puts parked delivery id back at the end of its channel's queue,
// as it was queued, removes it from the parked stream, and tells the
// relay holding the channel's agent, if any, to send it. It returns the
// delivery without its body.
func (s *Store) Requeue(id string) (relay.Parked, error) {
	return s.takeParked(id, "requeue", func(ctx context.Context, pm *parkedMsg) error {
		if err := s.putQueued(ctx, pm); err != nil {
			return err
		}
		// As Router.Kick does from another instance.
		return s.cfg.Conn.Publish(s.cfg.Prefix+".agent."+pm.channel+".kick", nil)
	})
}

// DropParked deletes parked delivery id for good and returns it without
// its body.
func (s *Store) DropParked(id string) (relay.Parked, error) {
	return s.takeParked(id, "drop", func(context.Context, *parkedMsg) error { return nil })
}

// takeParked runs then on parked delivery id, then removes it from the
// parked stream.
func (s *Store) takeParked(id, what string, then func(ctx context.Context, pm *parkedMsg) error) (relay.Parked, error) {
	if !validToken(id) {
		return relay.Parked{}, devhook.Errorf(devhook.ENOTFOUND, "no parked delivery %.200q", id)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	pm, err := s.parkedMsg(ctx, id)
	if err == nil {
		err = then(ctx, &pm)
	}
	var p relay.Parked
	if err == nil {
		p = s.parkedOf(ctx, &pm, false)
		err = s.deleteParked(ctx, pm.channel, pm.id)
	}
	if err == nil && what == "drop" {
		// Its object, if it has one (a requeued entry has its own copy).
		err = s.deleteObjectOf(ctx, pm.m.Header)
	}
	if err == nil {
		err = s.cfg.Conn.FlushWithContext(ctx)
	}
	if err != nil {
		return relay.Parked{}, fmt.Errorf("natsrelay: %s parked delivery %s: %w", what, id, err)
	}
	return p, nil
}

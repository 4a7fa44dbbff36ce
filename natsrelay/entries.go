package natsrelay

// Queued and parked deliveries as JetStream keeps them.
//
// An entry is one message of the stream DEVHOOK_QUEUE or DEVHOOK_PARKED,
// its subject ending in the delivery id. When the delivery's deliver frame
// (wire.EncodeDelivery: head and body) fits one NATS message with room
// for headers (the connection's max_payload less headroom), the entry holds
// it: one message written, one read, as for any small delivery.
//
// A larger frame is an object of the bucket devhook_large (JetStream's
// Object Store), named <channel>.<delivery id>, written in chunks of
// max_payload less headroom; the entry is then an empty message whose
// headers point to it:
//
//	Devhook-Object: <channel>.<delivery id>
//	Devhook-Size:   <bytes of the frame>
//
// The order of the writes makes a writer that dies between parts
// harmless:
//
//   - writing: the object, whole (the Object Store writes its chunks,
//     then the metadata that makes it visible), then the entry. When the
//     entry is refused (the queue is full: the sender gets 503) or the
//     object's write fails, the writer deletes what it wrote. A writer
//     that dies before the entry leaves an object no entry points to, and
//     no 202 to its sender, who sends again: the sweep removes it
//     (orphans.go).
//   - reading: an entry whose object is missing or damaged is a
//     relay.UnreadableError, which the relay parks with the reason: never
//     dropped silently.
//   - dequeuing: the entry, then its object. A crash between leaves an
//     object no entry points to, never an entry without its object.
//   - moving an entry to the other stream (parking it): its object is
//     written again, under the same name, before the new entry, so that
//     it lives as long as the new entry; then the old entry is removed.
//
// Objects no entry points to are removed by the sweep of orphans
// (orphans.go) once older than Config.OrphanGrace; the bucket's TTL,
// Quota.MaxAge and an hour (longer than any entry pointing to one lives,
// as entries expire after Quota.MaxAge and are written after their
// object), is the last resort. The bucket is bounded by Quota.TotalBytes
// as the queue stream is: when full, Enqueue fails and the sender gets
// 503; nothing a refused delivery wrote stays to keep it full.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// Headers of entries.
const (
	hdrObject = "Devhook-Object"
	hdrSize   = "Devhook-Size"
	hdrReason = "Devhook-Reason"
)

// headroom is what a message keeps free of payload below max_payload, for
// its headers: NATS's and JetStream's (ids, expectations: some hundred
// bytes), and this package's (a part number, a parked delivery's reason,
// at most maxReason).
const headroom = 8 << 10

// maxReason bounds a parked delivery's reason, in bytes.
const maxReason = 2 << 10

// MinMaxPayload is the smallest max_payload of NATS servers the relay
// works with: parts of a large delivery are max_payload less 8 KiB.
const MinMaxPayload = 32 << 10

// partSize is the largest payload of one message on nc: max_payload of the
// server it is connected to, less headroom.
func partSize(nc *nats.Conn) int {
	return int(max(nc.MaxPayload(), MinMaxPayload)) - headroom
}

// objectTTL is how long the bucket keeps an object: Quota.MaxAge and a
// margin, so that an object outlives the entries pointing to it.
func objectTTL(queueMaxAge time.Duration) time.Duration { return queueMaxAge + time.Hour }

func objectName(channel, id string) string { return channel + "." + id }

// idOf is the delivery id of an entry: the last token of its subject.
func idOf(subject string) string { return subject[strings.LastIndexByte(subject, '.')+1:] }

// isObjectEntry reports whether an entry's headers point to an object.
func isObjectEntry(h nats.Header) bool { return h.Get(hdrObject) != "" }

// writeEntry stores frame, the deliver frame of delivery id of channel, as
// the entry subject with headers hdr (nil for none): inline, or as an
// object first. opts are those of the entry's publish. An object whose
// entry JetStream refused, or that was cut short, is deleted (dropObject).
func (s *Store) writeEntry(ctx context.Context, subject, channel, id string, frame []byte, hdr nats.Header, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	m := &nats.Msg{Subject: subject, Header: hdr}
	name := ""
	if len(frame) <= partSize(s.cfg.Conn) {
		m.Data = frame
	} else {
		name = objectName(channel, id)
		if err := s.putObject(ctx, name, frame); err != nil {
			// Cut short: no entry of this write points to what
			// it left.
			s.dropObject(channel, id, name, err)
			return nil, err
		}
		m.Header = pointTo(hdr, name, len(frame))
	}
	if s.beforeEntry != nil {
		s.beforeEntry(name)
	}
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil && name != "" && refused(err) {
		s.dropObject(channel, id, name, err)
	}
	return ack, err
}

// refused reports whether err, of a publish, says JetStream did not store
// the message: it answered with an error (a full queue, no storage), or
// nothing listens on the subject. Otherwise (a timeout, NATS lost) the
// message may be stored all the same.
func refused(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// dropObject deletes object name, of delivery id of channel, written for
// an entry that was not stored (the write failed with err), unless an
// entry points to it all the same: a move between the streams writes the
// object of an entry that stays. When the publish's fate is unknown the
// entry may be stored after all: writeEntry does not call dropObject, and
// the object is left to the sweep (orphans.go), which removes it after
// Config.OrphanGrace if no entry came; so is one this fails to delete. In
// a fresh context: the write's may be over.
func (s *Store) dropObject(channel, id, name string, err error) {
	ctx, cancel := s.ctx()
	defer cancel()
	pointed, perr := s.pointedTo(ctx, channel, id)
	if perr == nil && !pointed {
		perr = s.deleteObjectOf(ctx, nats.Header{hdrObject: {name}})
	}
	if perr != nil {
		s.cfg.Logf("relay: channel %s: delivery %s not queued (%v), and what was written of its object stays: %v (the sweep removes it)", channel, id, err, why(ctx, perr))
	}
}

// pointedTo reports whether an entry of the queue or of the parked
// deliveries points to the object of delivery id of channel. The queue is
// read first: an entry moves from the queue to the parked deliveries (or
// back) by writing the new entry before removing the old, so that one of
// the two is always seen.
func (s *Store) pointedTo(ctx context.Context, channel, id string) (bool, error) {
	for _, e := range []struct {
		st      jetstream.Stream
		subject string
	}{{s.queue, s.queueSubject(channel, id)}, {s.parked, s.parkedSubject(channel, id)}} {
		m, err := e.st.GetLastMsgForSubject(ctx, e.subject)
		switch {
		case err == nil:
			if isObjectEntry(m.Header) {
				return true, nil
			}
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return false, err
		}
	}
	return false, nil
}

// mendObject writes frame again as the object of entry m, of delivery id
// of channel, queued already, if the object is missing: the delivery is
// being queued again, and its entry would otherwise be unreadable.
func (s *Store) mendObject(ctx context.Context, channel, id string, m *jetstream.RawStreamMsg, frame []byte) error {
	name := m.Header.Get(hdrObject)
	if name == "" {
		return nil
	}
	_, err := s.objects.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		s.cfg.Logf("relay: channel %s: delivery %s is queued, but its object was missing: written again", channel, id)
		err = s.putObject(ctx, name, frame)
	}
	if err != nil {
		return fmt.Errorf("natsrelay: enqueue delivery %s for channel %s: %w", id, channel, fullError(why(ctx, err)))
	}
	return nil
}

// pointTo returns hdr, or new headers, pointing to object name of size
// bytes.
func pointTo(hdr nats.Header, name string, size int) nats.Header {
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(hdrObject, name)
	hdr.Set(hdrSize, strconv.Itoa(size))
	return hdr
}

// putObject writes frame as object name, in parts of partSize.
func (s *Store) putObject(ctx context.Context, name string, frame []byte) error {
	var r io.Reader = bytes.NewReader(frame)
	if s.beforePart != nil {
		r = &hookedReader{r: r, hook: s.beforePart}
	}
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(partSize(s.cfg.Conn))}}
	if _, err := s.objects.Put(ctx, meta, r); err != nil {
		return fmt.Errorf("write object %s: %w", name, err)
	}
	return nil
}

// entryFrame returns the deliver frame of entry m: its data, or its
// object. An object missing or damaged is a *relay.UnreadableError.
func (s *Store) entryFrame(ctx context.Context, m *jetstream.RawStreamMsg) ([]byte, error) {
	name := m.Header.Get(hdrObject)
	if name == "" {
		return m.Data, nil
	}
	frame, err := s.getObject(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, &relay.UnreadableError{ID: idOf(m.Subject), Err: fmt.Errorf("its object %s in bucket %s is missing (expired, or deleted)", name, s.cfg.Prefix+"_large")}
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return nil, &relay.UnreadableError{ID: idOf(m.Subject), Err: fmt.Errorf("its object %s in bucket %s is damaged: %w", name, s.cfg.Prefix+"_large", err)}
	case err != nil:
		return nil, fmt.Errorf("read object %s: %w", name, err)
	}
	if want := m.Header.Get(hdrSize); want != strconv.Itoa(len(frame)) {
		return nil, &relay.UnreadableError{ID: idOf(m.Subject), Err: fmt.Errorf("its object %s has %d bytes, the entry says %s", name, len(frame), want)}
	}
	return frame, nil
}

// getObject reads object name whole. The Object Store checks its digest.
func (s *Store) getObject(ctx context.Context, name string) ([]byte, error) {
	res, err := s.objects.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, int(info.Size)+bytes.MinRead))
	if _, err := buf.ReadFrom(res); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readEntry returns the delivery of entry m of channel's queue or parked
// deliveries. An entry that cannot be read (damaged, its object missing)
// is a *relay.UnreadableError.
func (s *Store) readEntry(ctx context.Context, channel string, m *jetstream.RawStreamMsg) (*devhook.Delivery, error) {
	frame, err := s.entryFrame(ctx, m)
	if err != nil {
		return nil, err
	}
	d, err := wire.DecodeDelivery(channel, frame)
	if err != nil {
		return nil, &relay.UnreadableError{ID: idOf(m.Subject), Err: err}
	}
	return d, nil
}

// copyEntry writes entry m, of delivery id of channel, again as the entry
// subject, with headers hdr (nil for none) and publish options opts: the
// move between the queue and the parked deliveries. Its object, if it has
// one, is written again first (under the same name), so that it lives as
// long as the new entry; one already missing or damaged is not, and the
// new entry points to it all the same (it reads as unreadable).
func (s *Store) copyEntry(ctx context.Context, m *jetstream.RawStreamMsg, subject, channel, id string, hdr nats.Header, opts ...jetstream.PublishOpt) error {
	if run, ok := m.Header[hdrRun]; ok { // the run goes with the entry (runs.go)
		if hdr == nil {
			hdr = nats.Header{}
		}
		hdr[hdrRun] = run
	}
	if !isObjectEntry(m.Header) {
		_, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: hdr, Data: m.Data}, opts...)
		return err
	}
	frame, err := s.entryFrame(ctx, m)
	var bad *relay.UnreadableError
	switch {
	case errors.As(err, &bad):
		if hdr == nil {
			hdr = nats.Header{}
		}
		hdr.Set(hdrObject, m.Header.Get(hdrObject))
		hdr.Set(hdrSize, m.Header.Get(hdrSize))
		_, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: hdr}, opts...)
		return err
	case err != nil:
		return err
	}
	if _, err := s.writeEntry(ctx, subject, channel, id, frame, hdr, opts...); err != nil {
		return err
	}
	if len(frame) <= partSize(s.cfg.Conn) {
		// Inline now (the NATS servers' max_payload grew): the
		// object is of no use any more.
		if err := s.deleteObjectOf(ctx, m.Header); err != nil {
			s.cfg.Logf("relay: %v (the sweep removes it)", err)
		}
	}
	return nil
}

// deleteObjectOf deletes the object entry headers h point to, if any. One
// already gone is not an error.
func (s *Store) deleteObjectOf(ctx context.Context, h nats.Header) error {
	name := h.Get(hdrObject)
	if name == "" {
		return nil
	}
	if err := s.objects.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete object %s: %w", name, err)
	}
	return nil
}

// hookedReader calls hook with the bytes read so far before each read:
// the tests' way of stopping an instance between the parts of an object.
type hookedReader struct {
	r    io.Reader
	n    int
	hook func(written int)
}

func (h *hookedReader) Read(p []byte) (int, error) {
	h.hook(h.n)
	n, err := h.r.Read(p)
	h.n += n
	return n, err
}

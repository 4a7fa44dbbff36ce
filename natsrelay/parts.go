package natsrelay

// A live delivery passed to another instance, and the agent's answer
// passed back, in parts when larger than one NATS message.
//
// The request (wire.EncodeDelivery) and the answer (wire.EncodeAnswer)
// are byte strings. One that fits a message (max_payload less headroom)
// is that message, as for any small delivery: a NATS request to
// devhook.agent.<channel>.deliver and its reply. A larger one is cut in
// parts of that size. The sender's instance B subscribes to an inbox of
// its own for the delivery (R), and:
//
//	B → devhook.agent.<channel>.deliver   reply R, part 0, headers
//	                                       Devhook-Parts: <n>  Devhook-Size: <bytes>
//	A → R    Devhook-Parts-To: <P>         A, the instance holding the agent, subscribed
//	                                       to an inbox of its own for the delivery (P);
//	                                       or a Devhook-Error reply (no agent here)
//	B → P    Devhook-Part: <i>, part i     for i = 1 … n-1, in order
//	A → R    the answer: one message, or its part 0 with Devhook-Parts and
//	         Devhook-Size, then Devhook-Part: <i> and part i, in order
//
// A takes the delivery whole or not at all: it hands it to the agent only
// once every part has come, in order, with the size announced; a part
// missing or late by more than Config.Timeout ends the exchange, and A
// replies with an error (if B is still there to read it, it queues the
// delivery: 202). So an instance that dies between parts loses nothing and
// duplicates nothing: B dead, A never delivers, and B's sender, who got no
// answer, sends again; A dead, B gets no answer and queues the delivery,
// as for a single message. B likewise takes the answer only whole. The
// answer acknowledges the delivery as one. Parts travel on core NATS,
// whose order between one publisher and one subscriber is kept; neither
// instance holds more than the announced size, which it refuses beyond
// the relay's largest frame.

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Headers of messages in parts.
const (
	hdrParts   = "Devhook-Parts"
	hdrPart    = "Devhook-Part"
	hdrPartsTo = "Devhook-Parts-To"
	// nats.go's "no responders" reply: status 503, no data.
	hdrStatus = "Status"
)

func isNoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get(hdrStatus) == "503"
}

// numParts is the number of parts of data in parts of size.
func numParts(data []byte, size int) int { return (len(data) + size - 1) / size }

// part is part i of data in parts of size.
func part(data []byte, size, i int) []byte { return data[i*size : min((i+1)*size, len(data))] }

// firstPart is the message carrying part 0 of data, which goes in n parts.
func firstPart(subject, reply string, data []byte, size, n int) *nats.Msg {
	h := nats.Header{}
	h.Set(hdrParts, strconv.Itoa(n))
	h.Set(hdrSize, strconv.Itoa(len(data)))
	return &nats.Msg{Subject: subject, Reply: reply, Header: h, Data: part(data, size, 0)}
}

// publishParts publishes parts from … n-1 of data to subject, calling
// before, if set, before each, while ctx lasts: not into nats.go's buffer
// for a reconnect.
func publishParts(ctx context.Context, nc *nats.Conn, subject string, data []byte, size, from, n int, before func(i int)) error {
	for i := from; i < n; i++ {
		if before != nil {
			before(i)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("part %d of %d: %w", i+1, n, context.Cause(ctx))
		}
		m := &nats.Msg{Subject: subject, Header: nats.Header{hdrPart: {strconv.Itoa(i)}}, Data: part(data, size, i)}
		if err := nc.PublishMsg(m); err != nil {
			return fmt.Errorf("part %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}

// errParts is the error of a message in parts that did not come whole.
var errParts = errors.New("incomplete message in parts")

// collect reads the parts after first, which announced them, from sub:
// each within wait of the one before, and in ctx. It returns the whole,
// at most limit bytes.
func collect(ctx context.Context, sub *nats.Subscription, first *nats.Msg, limit int64, wait func() (context.Context, context.CancelFunc)) ([]byte, error) {
	n, err1 := strconv.Atoi(first.Header.Get(hdrParts))
	size, err2 := strconv.ParseInt(first.Header.Get(hdrSize), 10, 64)
	if err1 != nil || err2 != nil || n < 2 || size < int64(n) || size > limit || int64(len(first.Data)) > size {
		return nil, fmt.Errorf("%w: %d parts of %d bytes announced (at most %d)", errParts, n, size, limit)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, first.Data...)
	for i := 1; i < n; i++ {
		pctx, cancel := wait()
		m, err := sub.NextMsgWithContext(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return nil, fmt.Errorf("%w: part %d of %d: %w", errParts, i+1, n, err)
		}
		if got := m.Header.Get(hdrPart); got != strconv.Itoa(i) {
			return nil, fmt.Errorf("%w: part %q where part %d of %d was due", errParts, got, i+1, n)
		}
		if int64(len(buf)+len(m.Data)) > size {
			return nil, fmt.Errorf("%w: parts over the %d bytes announced", errParts, size)
		}
		buf = append(buf, m.Data...)
	}
	if int64(len(buf)) != size {
		return nil, fmt.Errorf("%w: %d bytes of the %d announced", errParts, len(buf), size)
	}
	return buf, nil
}

// subscribe subscribes to a new inbox of nc for the parts of one message
// of at most limit bytes.
func subscribe(nc *nats.Conn, limit int64) (*nats.Subscription, error) {
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return nil, err
	}
	// nats.go drops what is over a subscription's pending limits (64 MiB
	// by default): a part dropped ends the exchange, never a larger one.
	if err := sub.SetPendingLimits(-1, int(min(limit+1<<20, 1<<31-1))); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

// requestInParts sends data, larger than a message, to subject as the
// top of this file says, and returns the reply: the answer's first message
// and the answer whole (its data, for a single message).
func (r *Router) requestInParts(ctx context.Context, subject string, data []byte) (*nats.Msg, []byte, error) {
	nc := r.cfg.Conn
	size := partSize(nc)
	n := numParts(data, size)
	sub, err := subscribe(nc, r.cfg.maxFrame())
	if err != nil {
		return nil, nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishMsg(firstPart(subject, sub.Subject, data, size, n)); err != nil {
		return nil, nil, err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, nil, err
	}
	if isNoResponders(m) {
		return nil, nil, nats.ErrNoResponders
	}
	to := m.Header.Get(hdrPartsTo)
	if to == "" {
		return m, m.Data, nil // an error: no agent there
	}
	if err := publishParts(ctx, nc, to, data, size, 1, n, r.beforePart); err != nil {
		return nil, nil, err
	}
	if m, err = sub.NextMsgWithContext(ctx); err != nil {
		return nil, nil, err
	}
	if m.Header.Get(hdrParts) == "" {
		return m, m.Data, nil
	}
	answer, err := collect(ctx, sub, m, r.cfg.maxFrame(), func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, r.cfg.Timeout)
	})
	if err != nil {
		return nil, nil, err
	}
	return m, answer, nil
}

// receiveParts takes the rest of a delivery whose part 0 is m, as the top
// of this file says.
func (r *Router) receiveParts(m *nats.Msg) ([]byte, error) {
	nc := r.cfg.Conn
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.ResponseTimeout)
	if err != nil {
		return nil, err
	}
	defer cancel()
	sub, err := subscribe(nc, r.cfg.maxFrame())
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	goAhead := &nats.Msg{Header: nats.Header{hdrPartsTo: {sub.Subject}}}
	if err := m.RespondMsg(goAhead); err != nil {
		return nil, err
	}
	data, err := collect(ctx, sub, m, r.cfg.maxFrame(), func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, r.cfg.Timeout)
	})
	return data, why(ctx, err)
}

// respond replies to m with data: one message, or in parts.
func (r *Router) respond(m *nats.Msg, data []byte) error {
	nc := r.cfg.Conn
	size := partSize(nc)
	if len(data) <= size {
		return m.Respond(data)
	}
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	if err != nil {
		return err
	}
	defer cancel()
	n := numParts(data, size)
	if err := nc.PublishMsg(firstPart(m.Reply, "", data, size, n)); err != nil {
		return err
	}
	return why(ctx, publishParts(ctx, nc, m.Reply, data, size, 1, n, r.beforePart))
}

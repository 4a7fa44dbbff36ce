package natsrelay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
)

// The runs of the queue, for QueuedRuns (relay.QueueRunCounter).
//
// When an agent connects, the relay asks which runs the channel's queue
// holds, so that a live run.status delivery waits behind the queue only
// when its run has deliveries in it (relay/behind.go). Each queue entry
// carries its delivery's run in a header (Devhook-Run, empty for a
// delivery of no run), written by Enqueue and carried by every move
// between the streams; QueuedRuns reads the channel's entries through a
// consumer that delivers their headers only, never their bodies or
// objects. An entry without the header (queued by an earlier devhook)
// makes the list fail: the relay then holds every run.status delivery
// behind the queue until it is sent, as it did for all before.

const hdrRun = "Devhook-Run"

var _ relay.QueueRunCounter = (*Store)(nil)

// errRunUnknown: a queue entry does not say its run.
var errRunUnknown = errors.New("an entry queued by an earlier devhook does not say its run")

// runHeader is the header of a queue entry of a delivery with body.
func runHeader(body []byte) nats.Header {
	return nats.Header{hdrRun: {headerRun(devhook.ParseEvent(body).RunID)}}
}

// headerRun is run as a header's value (of an entry, or of a kick): as
// it is, unless a header might not carry it so (NATS trims spaces and
// tabs at a value's ends and turns line breaks into spaces: " r" would
// come back as "r", a run of spaces as none, and a live delivery of the
// run would be taken for another run's) or it holds a quote: then quoted
// (strconv.Quote). runOfHeader reads it back.
func headerRun(run string) string {
	if run == "" || strings.TrimSpace(run) == run && utf8.ValidString(run) &&
		strings.IndexFunc(run, func(r rune) bool { return r == '"' || !unicode.IsPrint(r) }) < 0 {
		return run
	}
	return strconv.Quote(run)
}

// runOfHeader is the run of a header's value written by headerRun.
func runOfHeader(v string) string {
	if strings.HasPrefix(v, `"`) {
		if run, err := strconv.Unquote(v); err == nil {
			return run
		}
	}
	return v
}

// runsBatch bounds the entries one fetch of QueuedRuns asks for.
const runsBatch = 1024

// QueuedRuns implements relay.QueueRunCounter from the entries' headers:
// the run of each run.status delivery in channel's queue, by id.
func (s *Store) QueuedRuns(channel string) (map[string]string, error) {
	if !validToken(channel) {
		return nil, devhook.Errorf(devhook.EINVALID, "natsrelay: invalid channel id %q", channel)
	}
	runs, err := s.queuedRuns(channel)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: list the runs of channel %s's queue: %w", channel, err)
	}
	return runs, nil
}

func (s *Store) queuedRuns(channel string) (map[string]string, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	// Ephemeral: removed by the server if this instance dies before it
	// deletes it.
	cons, err := s.queue.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: s.cfg.Prefix + ".queue." + channel + ".*", HeadersOnly: true,
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: max(s.cfg.Timeout, 5*time.Second), MemoryStorage: true,
	})
	if err != nil {
		return nil, why(ctx, err)
	}
	defer func() {
		dctx, dcancel := s.ctx()
		s.queue.DeleteConsumer(dctx, cons.CachedInfo().Name)
		dcancel()
	}()
	runs := make(map[string]string)
	names := make(map[string]string) // one string per run
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, runsBatch)), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, why(ctx, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			vals, ok := m.Headers()[hdrRun]
			if !ok {
				return nil, fmt.Errorf("%w (delivery %s)", errRunUnknown, idOf(m.Subject()))
			}
			if len(vals) > 0 && vals[0] != "" {
				run, ok := names[vals[0]]
				if !ok {
					run = runOfHeader(vals[0])
					names[vals[0]] = run
				}
				runs[idOf(m.Subject())] = run
			}
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
		}
		if err := batch.Error(); err != nil {
			return nil, why(ctx, err)
		}
		if n == 0 {
			break // removed meanwhile
		}
	}
	return runs, nil
}

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
// behind the queue until it is sent, as it did for all before. So does an
// entry whose run was too long for a header (maxHeaderRun).

const hdrRun = "Devhook-Run"

var _ relay.QueueRunCounter = (*Store)(nil)

// errRunUnknown: a queue entry does not say its run.
var errRunUnknown = errors.New("an entry queued by an earlier devhook does not say its run")

// runHeader is the header of a queue entry of a delivery with body.
func runHeader(body []byte) nats.Header {
	v, _ := headerRun(devhook.ParseEvent(body).RunID)
	return nats.Header{hdrRun: {v}}
}

// maxHeaderRun bounds a run in a header, quoted: an entry's headers all
// fit in the headroom (8 KiB) its message keeps below max_payload, and a
// run id as long as a body made its entry too large to be queued.
const maxHeaderRun = 1 << 10

// runTooLong is the header value of a run longer than maxHeaderRun: not
// one headerRun writes for a run (a quote alone). QueuedRuns then fails,
// as for an entry that does not say its run.
const runTooLong = `"`

// errRunTooLong: a queue entry's run was too long for its header.
var errRunTooLong = errors.New("a queued delivery's run id is too long to be said in its entry")

// headerRun is run as a header's value (of an entry, or of a kick): as
// it is, unless a header might not carry it so (NATS trims spaces and
// tabs at a value's ends and turns line breaks into spaces: " r" would
// come back as "r", a run of spaces as none, and a live delivery of the
// run would be taken for another run's) or it holds a quote: then quoted
// (strconv.Quote). runOfHeader reads it back.
// A run longer than maxHeaderRun is runTooLong, and ok false.
func headerRun(run string) (v string, ok bool) {
	v = run
	if run != "" && (strings.TrimSpace(run) != run || !utf8.ValidString(run) ||
		strings.IndexFunc(run, func(r rune) bool { return r == '"' || !unicode.IsPrint(r) }) >= 0) {
		v = strconv.Quote(run)
	}
	if len(v) > maxHeaderRun {
		return runTooLong, false
	}
	return v, true
}

// runOfHeader is the run of a header's value written by headerRun; ok is
// false for runTooLong.
func runOfHeader(v string) (run string, ok bool) {
	if v == runTooLong {
		return "", false
	}
	if strings.HasPrefix(v, `"`) {
		if run, err := strconv.Unquote(v); err == nil {
			return run, true
		}
	}
	return v, true
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
	if s.beforeRunsFetch != nil {
		s.beforeRunsFetch()
	}
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		if err := ctx.Err(); err != nil {
			return nil, why(ctx, err)
		}
		// What the stream holds, without waiting for more: an entry
		// removed since the consumer counted it never comes.
		batch, err := cons.FetchNoWait(int(min(pending, runsBatch)))
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
					if run, ok = runOfHeader(vals[0]); !ok {
						return nil, fmt.Errorf("%w (delivery %s)", errRunTooLong, idOf(m.Subject()))
					}
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
			// Removed meanwhile, or not sent in time: only the first
			// is the end of the list.
			info, err := cons.Info(ctx)
			if err != nil {
				return nil, why(ctx, err)
			}
			if info.NumPending > 0 {
				return nil, fmt.Errorf("%d entries of the queue could not be read in time", info.NumPending)
			}
			break
		}
	}
	return runs, nil
}

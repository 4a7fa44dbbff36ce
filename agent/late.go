package agent

// Late: a live delivery's answer that comes too late for the relay.
//
// The relay lets a live delivery's sender wait for the answer as long as
// its hello says (wire.HelloResponseTimeout: its --timeout), counted from
// the delivery's frame; then the sender gets 504 from the relay, and an
// answer that comes later is dropped. The agent counts that wait from when
// it read the frame, a little after the relay's clock started
// (senderWait, set as the delivery is read: the time it waited in its
// run's line counts too). A forward whose outcome (the receiver's answer,
// or its failure; the answer goes back once the copies to the other
// --forward targets are done too) is ready within lateMargin of that end,
// or after it, is not passed on: the agent answers 504 itself, so that the sender gets 504
// whichever of the two 504s reaches it, and the attempt keeps the
// receiver's answer with a note that the sender got 504 (Attempt.Error),
// which the terminal line shows beside it ("→ 200 (sender got 504)").
// The margin covers the answer's way back to the relay and the attempt's
// record on the way; an answer ready just before it that takes longer
// than the margin to reach the relay (a slow link, a large body, a record
// that waits for the disk) can still find the relay gone, and is then
// recorded as passed on (docs/RELIABILITY.md, Known limits), as is one
// whose sender hung up: the relay does not tell the agent. So is one whose
// frame waited unread while every worker was busy (workers.go): the
// relay's wait started then, the agent's clock only when it reads it.
//
// A relay that does not say how long it waits (one from before the hello
// said it) gets every answer, as before: the agent cannot tell which its
// sender got. The agent says once per Run when it waits for its receiver
// longer than the relay waits for it (relayWaitWarning).

import (
	"fmt"
	"net/http"
	"time"

	"github.com/devhook/devhook"
)

// senderWait is how long the relay waits for a live delivery's answer:
// wait, as the relay's hello said, and so until by on the agent's clock.
// Zero when the relay does not say, and for a queued delivery, whose
// sender is not waiting.
type senderWait struct {
	wait time.Duration
	by   time.Time
}

// lateMargin is how long before the relay stops waiting an answer must
// be ready to be passed on: a tenth of the wait, at most a second.
func lateMargin(wait time.Duration) time.Duration {
	return min(wait/10, time.Second)
}

// tooLate reports whether at, the forward of a live delivery whose
// answer goes back to its sender, which the relay waits for as sw says,
// came too late for the relay (see the top of this file). Then at says
// that its sender got 504, and answer is the agent's own 504's text.
func (a *Agent) tooLate(sw senderWait, at *devhook.Attempt) (answer string, late bool) {
	if sw.wait <= 0 || a.cfg.Now().Before(sw.by.Add(-lateMargin(sw.wait))) {
		return "", false
	}
	wait := FormatDuration(sw.wait)
	note := fmt.Sprintf("the sender got %d: the relay lets a sender wait %s for the answer (its --timeout), and this one came too late for it", http.StatusGatewayTimeout, wait)
	if at.Error != "" {
		note = at.Error + "; " + note
	}
	at.Error = note
	if at.Status != 0 {
		return fmt.Sprintf("the receiver answered %d too late for the relay, which lets a sender wait %s; devhook recorded the answer", at.Status, wait), true
	}
	return fmt.Sprintf("the receiver did not answer within the %s the relay lets a sender wait", wait), true
}

// relayWaitWarning says that the relay lets a sender wait less (wait)
// than the agent waits for its receiver, or returns "" when it does not
// or does not say: a receiver slower than the relay is recorded, but its
// sender gets 504.
func (a *Agent) relayWaitWarning(wait time.Duration) string {
	if wait <= 0 || a.cfg.ForwardTimeout <= wait {
		return ""
	}
	return fmt.Sprintf("the relay lets a sender wait %s for the answer (its --timeout), less than the %s devhook waits for the receiver (--timeout): "+
		"a receiver slower than %s is recorded, but its sender gets 504; give the relay a longer --timeout, or listen a shorter one",
		FormatDuration(wait), FormatDuration(a.cfg.ForwardTimeout), FormatDuration(wait))
}

package agent

// Answer: what goes back to the relay for each delivery, the last stage
// of its path (live.go). The answer, which the relay passes to a live
// delivery's sender; and, for a queued delivery once it is recorded (and
// owed, when its forward failed: owe.go), the acknowledgement that lets
// the relay drop it. A live delivery needs no ack: its sender is waiting
// for the answer, and gets 202 with the delivery queued if the answer does
// not come.
//
// processed, defined here, is what every stage before writes into: the
// Result, and what the answer is made of.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"syscall"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// processed is a delivery's Result along its path, plus what finish needs
// to answer.
type processed struct {
	Result
	recorded bool             // the delivery is on disk: a queued one is acknowledged
	answer   *devhook.Attempt // what to send back; nil with failure
	failure  string           // d is not recorded: 503
	unframed string           // the receiver's answer cannot go back through the relay: 502
	sender   senderWait       // how long the relay waits for a live delivery's answer (late.go)
	late     string           // the answer came too late for the relay (late.go): 504 with this
	busy     string           // not sent, its receiver's share full (shares.go): 503 with this
	rejected *devhook.Verdict // --verify enforce: answered as the reference receiver would
	behind   bool             // owed behind an earlier delivery of its run, not forwarded: 202
	key      string           // its run (orderKey), when it has a place in one: set by the order stage
	// ended: the connection ended while the delivery was held (queued.go):
	// nothing goes back, the relay sends it again on the next one.
	ended bool
}

// responder is the part of a relay connection finish needs.
type responder interface {
	Respond(id string, status int, header http.Header, body []byte) error
	Ack(id string) error
}

// finish answers the relay for d and reports the result.
func (a *Agent) finish(conn responder, d *devhook.Delivery, res *processed) {
	st, h, body := answerOf(*res)
	res.Status, res.Rejected = st, res.rejected != nil
	if err := conn.Respond(d.ID, st, h, body); err != nil {
		if reason := unframable(d.ID, st, h); reason != "" {
			// The answer itself cannot be framed: say so at once rather
			// than leave the sender waiting for the relay's timeout.
			a.cfg.Logf("delivery %s: %s", d.ID, reason)
			st, h, body = textAnswer(http.StatusBadGateway, "devhook: "+reason)
			res.Status, res.Error = st, reason
			err = conn.Respond(d.ID, st, h, body)
		}
		if err != nil && !d.Queued {
			// The relay queues it (its sender gets 202) and sends it
			// again: the printed line says so.
			res.Cut = true
		}
	}
	if res.recorded && d.Queued {
		if err := conn.Ack(d.ID); err != nil {
			res.Cut = true // not acknowledged: the relay keeps it
		}
	}
	if a.cfg.OnResult != nil {
		a.cfg.OnResult(res.Result)
	}
}

// answerOf is what goes back to the sender for p.
func answerOf(p processed) (int, http.Header, []byte) {
	switch {
	case p.rejected != nil:
		return textAnswer(p.rejected.Status, p.rejected.Text)
	case p.behind:
		return http.StatusAccepted, http.Header{"Content-Type": {"application/json"}},
			fmt.Appendf(nil, "{\"queued\":true,\"id\":%q,\"reason\":%q}\n", p.Delivery.ID,
				"an earlier delivery of this run is owed to the receiver; devhook keeps this one and forwards it after that one")
	case p.failure != "":
		st, h, b := textAnswer(http.StatusServiceUnavailable, p.failure)
		h["Retry-After"] = []string{strconv.Itoa(RetryAfter)}
		return st, h, b
	case p.unframed != "":
		return textAnswer(http.StatusBadGateway, "devhook: "+p.unframed)
	case p.late != "":
		return textAnswer(http.StatusGatewayTimeout, "devhook: "+p.late)
	case p.busy != "":
		st, h, b := textAnswer(http.StatusServiceUnavailable, "devhook: "+p.busy)
		h["Retry-After"] = []string{strconv.Itoa(RetryAfter)}
		return st, h, b
	case p.answer == nil:
		return textAnswer(http.StatusBadGateway, "devhook: nothing to forward to")
	case p.answer.Kind == devhook.AttemptDrop:
		return dropAnswer(p.Delivery.ID, p.answer.Route)
	case p.answer.Status == 0:
		return textAnswer(http.StatusBadGateway, "devhook: the local receiver did not answer: "+p.answer.Error)
	}
	if answerCut(p.answer) {
		// The body is the answer's start: the sender is told so, its
		// status left as the receiver's (a 5xx would be retried).
		h := make(http.Header, len(p.answer.Header)+1)
		maps.Copy(h, p.answer.Header)
		delete(h, "Content-Length") // the whole answer's
		h[devhook.AnswerCutHeader] = []string{strconv.Itoa(len(p.answer.Body))}
		return p.answer.Status, h, p.answer.Body
	}
	return p.answer.Status, p.answer.Header, p.answer.Body
}

// dropAnswer is what the sender of a delivery that route rt dropped gets:
// 202, so that the service does not send it again, and a JSON body that
// says devhook dropped it.
func dropAnswer(id string, rt *devhook.Route) (int, http.Header, []byte) {
	index, route := 0, devhook.RouteDefault
	if rt != nil {
		index, route = rt.Index, rt.Text
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the route's "->" as written
	enc.Encode(struct {
		Dropped bool   `json:"dropped"`
		ID      string `json:"id"`
		Route   int    `json:"route"`
		Text    string `json:"route_text"`
		Reason  string `json:"reason"`
	}{true, id, index, route, "devhook dropped this delivery by route " + strconv.Itoa(index) + " (" + route + "): recorded, not forwarded"})
	return http.StatusAccepted, http.Header{"Content-Type": {"application/json"}, devhook.AnswerHeader: {"agent"}}, b.Bytes()
}

// textAnswer is devhook's own answer to a sender: code, and msg as text.
func textAnswer(code int, msg string) (int, http.Header, []byte) {
	return code, http.Header{"Content-Type": {"text/plain; charset=utf-8"}, devhook.AnswerHeader: {"agent"}}, []byte(msg + "\n")
}

// unframable says why an answer with this status and header cannot be
// sent back through the relay, or returns "" when it can. Only a header
// near wire.MaxHeaderSize is encoded to find out.
func unframable(id string, status int, h http.Header) string {
	n := 64 + len(id)
	for k, vs := range h {
		n += len(k) + 10
		for _, v := range vs {
			n += len(v) + 10
		}
	}
	if n < wire.MaxHeaderSize {
		return ""
	}
	if _, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeResponse, ID: id, Status: status, Header: h}, nil); err == nil {
		return ""
	}
	size := 0
	for k, vs := range h {
		size += len(k)
		for _, v := range vs {
			size += len(v)
		}
	}
	return fmt.Sprintf("the receiver answered %d with %d bytes of headers, over the %d devhook can pass back to the sender", status, size, wire.MaxHeaderSize)
}

// shortCause names the kind of a storage error for a sender, without the
// local paths the full error carries.
func shortCause(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "disk full"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota exceeded"
	case errors.Is(err, syscall.EROFS):
		return "read-only file system"
	case errors.Is(err, syscall.EIO):
		return "I/O error"
	}
	return "storage error"
}

package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// subscribers returns the ids of the account's webhooks that subscribe to
// run.status, oldest first. The caller holds e.mu.
func (e *Emulator) subscribers(account string) []string {
	var ids []string
	for _, h := range e.webhooksOf(account) {
		for _, t := range h.EventTypes {
			if t == devhook.EventRunStatus {
				ids = append(ids, h.ID)
				break
			}
		}
	}
	return ids
}

// outgoing is what a delivery sends: the body, and the headers besides
// the signature. header nil means the service's own (Content-Type and
// User-Agent); a scenario's delivery brings the headers it was recorded with.
type outgoing struct {
	body   []byte
	header http.Header
}

// deliverAll sends ev to each of the account's webhooks in hooks, and
// returns once every first attempt has finished; retries go on in the
// background, so that a run's next event waits only for first attempts.
func (e *Emulator) deliverAll(ctx context.Context, account string, hooks []string, ev devhook.RunStatus) {
	body, err := json.Marshal(ev)
	if err != nil {
		return // a RunStatus always marshals
	}
	e.sendAll(ctx, account, hooks, outgoing{body: body})
}

// sendAll is deliverAll of any outgoing delivery.
func (e *Emulator) sendAll(ctx context.Context, account string, hooks []string, out outgoing) {
	var first sync.WaitGroup
	for _, id := range hooks {
		first.Add(1)
		done := sync.OnceFunc(first.Done)
		started := e.goroutine(func(ctx context.Context) {
			defer done()
			e.deliver(ctx, account, id, out, done)
		})
		if !started {
			done()
		}
	}
	first.Wait()
}

// deliver makes the first attempt and, while attempts fail, the retries
// after each of RetryDelays (the service's schedule, 1 s, 5 s and 25 s by
// default: a backoff of its own, kept exact, as docs/INTERFACE.md gives it).
// It stops when the webhook is deleted or the emulator closes. Each
// attempt is a conversation; a delivery that fails every attempt is
// logged once, with the count.
func (e *Emulator) deliver(ctx context.Context, account, hookID string, out outgoing, firstDone func()) {
	var why string
	for n := 0; n <= len(e.cfg.RetryDelays); n++ {
		if n > 0 {
			t := time.NewTimer(e.cfg.RetryDelays[n-1])
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		ok, stop, failed := e.attempt(ctx, account, hookID, out)
		if n == 0 {
			firstDone()
		}
		if ok || stop {
			return
		}
		why = failed
	}
	e.cfg.Logf("emulator: a delivery to webhook %q failed all %d attempts (the last: %s); its conversations say more", hookID, len(e.cfg.RetryDelays)+1, why)
}

// attempt POSTs the body, signed afresh, to the webhook's current endpoint
// and records the attempt as a conversation. stop is true when there is
// nothing more to do: the webhook is gone or the emulator is closing;
// failed says why an attempt failed.
func (e *Emulator) attempt(ctx context.Context, account, hookID string, out outgoing) (ok, stop bool, failed string) {
	body := out.body
	e.mu.Lock()
	h := e.st.webhooks[whKey(account, hookID)]
	if h == nil {
		e.mu.Unlock()
		return false, true, ""
	}
	endpoint, secret := h.EndpointURL, h.Secret
	e.mu.Unlock()

	actx, cancel := context.WithTimeout(ctx, e.cfg.AttemptTimeout)
	defer cancel()
	createdAt := e.now()
	cv := &conversation{Account: account, WebhookID: hookID, CreatedAt: createdAt, EndpointURL: endpoint,
		RequestBody: requestBody(body)}
	req, err := http.NewRequestWithContext(actx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		cv.fail(0, fmt.Sprintf("invalid endpoint_url: %v", err))
	} else {
		if out.header == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("User-Agent", UserAgent)
		} else {
			for k, v := range out.header {
				if !strings.EqualFold(k, devhook.SignatureHeader) && !strings.EqualFold(k, "Content-Length") && !strings.EqualFold(k, "Host") {
					req.Header[k] = v
				}
			}
			if _, ok := req.Header["User-Agent"]; !ok {
				req.Header["User-Agent"] = []string{""} // as recorded: none
			}
		}
		req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, createdAt, body))
		start := time.Now()
		resp, err := e.cfg.Client.Do(req)
		if err == nil {
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
			resp.Body.Close()
			cv.ResponseBody = string(b)
			cv.HTTPStatus = resp.StatusCode
			if rerr != nil && resp.StatusCode/100 == 2 {
				err = rerr // the answer broke off: not a success
			}
		}
		cv.DurationMS = time.Since(start).Milliseconds()
		switch {
		case ctx.Err() != nil:
			return false, true, "" // closing: no attempt to record
		case err != nil:
			cv.fail(cv.HTTPStatus, attemptError(err))
		case resp.StatusCode/100 != 2:
			cv.fail(resp.StatusCode, fmt.Sprintf("http %d", resp.StatusCode))
		default:
			cv.Status = "succeeded"
		}
	}
	if cv.Error != nil {
		failed = *cv.Error
	}
	id, err := e.newID()
	if err != nil {
		return false, true, failed
	}
	cv.ID = id
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.st.webhooks[whKey(account, hookID)] == nil {
		return false, true, failed // deleted while the attempt ran: its conversations went with it
	}
	cv.Seq = e.nextSeq()
	k := convKey(account, hookID, id)
	e.st.convs[k] = cv
	if err := e.persist(op{bucketConvs, k, cv}); err != nil {
		delete(e.st.convs, k)
		e.convWrites.fail(err)
	} else {
		e.convWrites.ok()
	}
	return cv.Status == "succeeded", false, failed
}

// failures logs a failure that may repeat once, with a count when it
// stops: not once per try. The caller holds whatever guards it.
type failures struct {
	what string
	logf func(string, ...any)
	n    int
}

func (f *failures) fail(err error) {
	f.n++
	if f.n == 1 {
		f.logf("emulator: %s failed: %v (told once; the count comes when it works again)", f.what, err)
	}
}

func (f *failures) ok() {
	if f.n > 0 {
		f.logf("emulator: %s works again after %d failures", f.what, f.n)
		f.n = 0
	}
}

// requestBody is a body as a conversation keeps it: as is when it is JSON,
// else as a JSON string of its text (a scenario's delivery may be neither).
func requestBody(body []byte) json.RawMessage {
	if json.Valid(body) {
		return json.RawMessage(body)
	}
	b, _ := json.Marshal(strings.ToValidUTF8(string(body), "\uFFFD"))
	return b
}

func (cv *conversation) fail(status int, msg string) {
	cv.Status, cv.HTTPStatus, cv.Error = "failed", status, &msg
}

// attemptError names why no (complete) answer came: "timeout",
// "connection refused", or the error's own text.
func attemptError(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	return err.Error()
}

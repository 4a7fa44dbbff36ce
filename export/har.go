package export

// Deliveries as an HTTP Archive, HAR 1.2
// (http://www.softwareishard.com/blog/har-12-spec/), for the tools that
// read one (browsers' network panels, HAR viewers, API clients, test
// recorders).
//
// One entry per attempt: each attempt is one request devhook sent a
// receiver and the answer it got, the exchange a HAR entry is. A
// delivery forwarded, then retried and replayed, is three entries; the
// entries are in the order they started. A delivery never forwarded is one
// entry whose response has status 0 (as a browser records a request that
// got no answer), at the URL --to names, else at unforwarded.invalid (a
// name that is no host, RFC 2606) with the delivery's path and query.
//
//	{"log": {"version": "1.2", "creator": {"name": "devhook", "version": "…"},
//	  "entries": [{
//	    "startedDateTime": "2026-01-02T03:04:05.678Z",  // the attempt's start
//	    "time": 1.234,                                  // its duration in ms (= timings.wait)
//	    "request": {
//	      "method": "POST", "url": "http://127.0.0.1:8080/hook?src=service",  // the URL called
//	      "httpVersion": "HTTP/1.1", "cookies": [], "headers": [{"name": …, "value": …}, …],
//	      "queryString": [{"name": "src", "value": "service"}],
//	      "postData": {"mimeType": "application/json", "params": [], "text": "{…}"},
//	      "headersSize": -1, "bodySize": 312},
//	    "response": {
//	      "status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1", "cookies": [], "headers": […],
//	      "content": {"size": 2, "mimeType": "text/plain", "text": "ok"},
//	      "redirectURL": "", "headersSize": -1, "bodySize": 2},
//	    "cache": {},
//	    "timings": {"blocked": -1, "dns": -1, "connect": -1, "send": 0, "wait": 1.234, "receive": 0, "ssl": -1},
//	    "comment": "delivery 0190…, attempt 1 of 1: forward, as it arrived",
//	    "_devhook": {"delivery": "0190…", "attempt": 1, "kind": "forward", "made": "as-arrived", "verdict": "ok"}
//	  }]}}
//
// The request is the one the attempt sent: the delivery as it arrived, or
// the one the attempt recorded when it differs (re-signed, edited, with
// listen's --header), Content-Length included. Header names are in
// alphabetical order, each name's values in the order they came. A body
// that is valid UTF-8 is "text"; any other is base64 with
// "encoding": "base64", the response's content as HAR 1.2 says, and the
// request's postData as HAR tools write it (HAR 1.2 has no encoding for
// postData; the proposal for 1.3 adds this one). A request or answer
// with no body has no postData, and no content text. An attempt that got
// no answer has status 0, "bodySize": -1 and its error in
// "response._error". A delivery some parts of which could not be read
// from the store (a damaged or missing body file) has them said in
// "_devhook.partial" of each of its entries; a request whose body could
// not be read has no postData and "bodySize": -1, and an attempt that
// could not be read no entry. devhook only knows how long an attempt
// took, not its phases: all of it is "wait". Fields of devhook's own
// start with "_", as the format asks.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// HAROptions say how to write a HAR. The zero value is valid.
type HAROptions struct {
	// Version is the creator's version (devhook's).
	Version string
	// To is the URL of deliveries never forwarded, with their path and
	// query appended; nil: unforwarded.invalid.
	To *url.URL
}

// HAR writes ds as an HTTP Archive 1.2 (see the top of this file), JSON
// with two-space indents and a final newline.
func HAR(ds []*devhook.Delivery, opt HAROptions) ([]byte, error) {
	log := harLog{Version: "1.2", Creator: harCreator{Name: "devhook", Version: opt.Version}, Entries: []harEntry{}}
	for _, d := range inOrder(ds) {
		n := len(log.Entries)
		for i := range d.Attempts {
			switch a := &d.Attempts[i]; {
			case a.ReadError != "":
				// Not read: nothing of it to write but its error (partial).
			case a.Kind == devhook.AttemptDrop:
				log.Entries = append(log.Entries, droppedEntry(d, a, opt.To))
			default:
				log.Entries = append(log.Entries, attemptEntry(d, a))
			}
		}
		if len(log.Entries) == n {
			e := unforwardedEntry(d, opt.To)
			if len(d.Attempts) > 0 { // none of them could be read
				e.Comment, e.Response = "delivery "+d.ID+": its attempts cannot be read", noAnswer("its attempts cannot be read")
			}
			log.Entries = append(log.Entries, e)
		}
		if d.Partial() {
			markPartial(log.Entries[n:], d)
		}
	}
	slices.SortStableFunc(log.Entries, func(a, b harEntry) int { return a.started.Compare(b.started) })
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(harFile{Log: log}); err != nil {
		return nil, fmt.Errorf("write the HAR: %w", err)
	}
	return buf.Bytes(), nil
}

type harFile struct {
	Log harLog `json:"log"`
}

type harLog struct {
	Version string     `json:"version"`
	Creator harCreator `json:"creator"`
	Entries []harEntry `json:"entries"`
}

type harCreator struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type harEntry struct {
	started time.Time
	ownBody bool // the request is the attempt's own, not the delivery's

	StartedDateTime string      `json:"startedDateTime"`
	Time            float64     `json:"time"`
	Request         harRequest  `json:"request"`
	Response        harResponse `json:"response"`
	Cache           struct{}    `json:"cache"`
	Timings         harTimings  `json:"timings"`
	Comment         string      `json:"comment,omitempty"`
	Devhook         harDevhook  `json:"_devhook"`
}

type harRequest struct {
	Method      string       `json:"method"`
	URL         string       `json:"url"`
	HTTPVersion string       `json:"httpVersion"`
	Cookies     []harCookie  `json:"cookies"`
	Headers     []harPair    `json:"headers"`
	QueryString []harPair    `json:"queryString"`
	PostData    *harPostData `json:"postData,omitempty"`
	HeadersSize int          `json:"headersSize"`
	BodySize    int          `json:"bodySize"`
}

type harPostData struct {
	MimeType string    `json:"mimeType"`
	Params   []harPair `json:"params"`
	Text     string    `json:"text"`
	Encoding string    `json:"encoding,omitempty"`
}

type harResponse struct {
	Status      int         `json:"status"`
	StatusText  string      `json:"statusText"`
	HTTPVersion string      `json:"httpVersion"`
	Cookies     []harCookie `json:"cookies"`
	Headers     []harPair   `json:"headers"`
	Content     harContent  `json:"content"`
	RedirectURL string      `json:"redirectURL"`
	HeadersSize int         `json:"headersSize"`
	BodySize    int         `json:"bodySize"`
	Error       string      `json:"_error,omitempty"`
}

type harContent struct {
	Size     int    `json:"size"`
	MimeType string `json:"mimeType"`
	Text     string `json:"text,omitempty"`
	Encoding string `json:"encoding,omitempty"`
}

type harPair struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type harCookie struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Path     string `json:"path,omitempty"`
	Domain   string `json:"domain,omitempty"`
	Expires  string `json:"expires,omitempty"`
	HTTPOnly bool   `json:"httpOnly,omitempty"`
	Secure   bool   `json:"secure,omitempty"`
}

type harTimings struct {
	Blocked float64 `json:"blocked"`
	DNS     float64 `json:"dns"`
	Connect float64 `json:"connect"`
	Send    float64 `json:"send"`
	Wait    float64 `json:"wait"`
	Receive float64 `json:"receive"`
	SSL     float64 `json:"ssl"`
}

type harDevhook struct {
	Delivery string `json:"delivery"`
	Attempt  int    `json:"attempt,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Made     string `json:"made,omitempty"`
	Verdict  string `json:"verdict,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	// Partial says what of the delivery could not be read from the store
	// (its body, attempts), and why.
	Partial string `json:"partial,omitempty"`
}

// harTime is how HAR writes a moment: ISO 8601 with milliseconds.
func harTime(t time.Time) string { return t.Format("2006-01-02T15:04:05.000Z07:00") }

func attemptEntry(d *devhook.Delivery, a *devhook.Attempt) harEntry {
	method, header, body := d.Method, d.Header, d.Body
	if r := a.Request; r != nil {
		method, header, body = r.Method, r.Header, r.Body
	}
	ms := math.Round(float64(a.Duration)/float64(time.Microsecond)) / 1000
	e := harEntry{
		started: a.StartedAt, StartedDateTime: harTime(a.StartedAt), Time: ms,
		Request: request(method, a.Target, header, body),
		Timings: harTimings{Blocked: -1, DNS: -1, Connect: -1, Wait: ms, SSL: -1},
		Comment: fmt.Sprintf("delivery %s, attempt %d of %d: %s", d.ID, a.Seq, len(d.Attempts), a.Kind),
		Devhook: harDevhook{Delivery: d.ID, Attempt: a.Seq, Kind: a.Kind, Made: a.Made, Verdict: d.Verdict.Result, RunID: d.Event.RunID},
	}
	if a.Made != "" {
		e.Comment += ", " + a.Made
	}
	e.ownBody = a.Request != nil
	if a.Status == 0 {
		e.Response = noAnswer(a.Error)
		return e
	}
	e.Response = harResponse{
		Status: a.Status, StatusText: http.StatusText(a.Status), HTTPVersion: "HTTP/1.1",
		Cookies: cookies((&http.Response{Header: a.Header}).Cookies()), Headers: pairs(a.Header),
		Content:     harContent{Size: len(a.Body), MimeType: utf8Text(a.Header.Get("Content-Type"))},
		RedirectURL: utf8Text(a.Header.Get("Location")), HeadersSize: -1, BodySize: len(a.Body),
	}
	e.Response.Content.Text, e.Response.Content.Encoding = bodyText(a.Body)
	return e
}

func unforwardedEntry(d *devhook.Delivery, to *url.URL) harEntry {
	target := "http://unforwarded.invalid" + d.Path
	if d.RawQuery != "" {
		target += "?" + d.RawQuery
	}
	if to != nil {
		target, _ = Target(d, to)
	}
	return harEntry{
		started: d.ReceivedAt, StartedDateTime: harTime(d.ReceivedAt),
		Request:  request(d.Method, target, d.Header, d.Body),
		Response: noAnswer("not forwarded"),
		Timings:  harTimings{Blocked: -1, DNS: -1, Connect: -1, SSL: -1},
		Comment:  "delivery " + d.ID + ": never forwarded",
		Devhook:  harDevhook{Delivery: d.ID, Verdict: d.Verdict.Result, RunID: d.Event.RunID},
	}
}

// droppedEntry is the drop a route of listen made of d (attempt a): sent
// nowhere, as a delivery never forwarded.
func droppedEntry(d *devhook.Delivery, a *devhook.Attempt, to *url.URL) harEntry {
	e := unforwardedEntry(d, to)
	why := "dropped by " + a.Route.String() + ": not forwarded"
	e.started, e.StartedDateTime = a.StartedAt, harTime(a.StartedAt)
	e.Response = noAnswer(why)
	e.Comment = fmt.Sprintf("delivery %s, attempt %d of %d: %s", d.ID, a.Seq, len(d.Attempts), why)
	e.Devhook.Attempt, e.Devhook.Kind = a.Seq, a.Kind
	return e
}

// markPartial marks the entries of d, some parts of which could not be
// read from the store: "_devhook.partial" says what and why, and a
// request whose body is the delivery's has neither body nor size (-1:
// unknown), never an empty body posing as the one that arrived.
func markPartial(entries []harEntry, d *devhook.Delivery) {
	why := d.Unreadable().Error()
	for i := range entries {
		e := &entries[i]
		e.Devhook.Partial = utf8Text(why)
		e.Comment += "; partial: parts of the delivery cannot be read (_devhook.partial)"
		if d.BodyError != "" && !e.ownBody {
			e.Request.PostData, e.Request.BodySize = nil, -1
		}
	}
}

// noAnswer is the response of an attempt that got none.
func noAnswer(why string) harResponse {
	return harResponse{Cookies: []harCookie{}, Headers: []harPair{}, HeadersSize: -1, BodySize: -1, Error: utf8Text(why)}
}

func request(method, target string, h http.Header, body []byte) harRequest {
	r := harRequest{Method: utf8Text(method), URL: utf8Text(target), HTTPVersion: "HTTP/1.1",
		Cookies: cookies((&http.Request{Header: h}).Cookies()), Headers: pairs(h), QueryString: []harPair{},
		HeadersSize: -1, BodySize: len(body)}
	if u, err := url.Parse(target); err == nil {
		r.QueryString = query(u.RawQuery)
	}
	if len(body) > 0 || h.Get("Content-Length") != "" {
		p := &harPostData{MimeType: utf8Text(h.Get("Content-Type")), Params: []harPair{}}
		p.Text, p.Encoding = bodyText(body)
		r.PostData = p
	}
	return r
}

// utf8Text is s with each byte that is not UTF-8 as U+FFFD, as
// encoding/json coerces a string: a JSON string holds UTF-8 only, and the
// archive is then the same bytes whether the deliveries were read from the
// store or through a running listen's JSON API.
func utf8Text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// bodyText is b as HAR text: itself when it is UTF-8, else base64 and
// the encoding's name.
func bodyText(b []byte) (text, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// pairs is h as HAR headers: names in alphabetical order, each one's
// values in order.
func pairs(h http.Header) []harPair {
	out := []harPair{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			out = append(out, harPair{Name: utf8Text(k), Value: utf8Text(v)})
		}
	}
	return out
}

// query is a raw query as HAR's queryString, in order: each name and
// value percent-decoded (+ as a space), or as it is when it does not
// decode.
func query(raw string) []harPair {
	out := []harPair{}
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		name, value, _ := strings.Cut(part, "=")
		out = append(out, harPair{Name: utf8Text(unescape(name)), Value: utf8Text(unescape(value))})
	}
	return out
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

func cookies(cs []*http.Cookie) []harCookie {
	out := []harCookie{}
	for _, c := range cs {
		hc := harCookie{Name: utf8Text(c.Name), Value: utf8Text(c.Value), Path: utf8Text(c.Path), Domain: utf8Text(c.Domain), HTTPOnly: c.HttpOnly, Secure: c.Secure}
		if !c.Expires.IsZero() {
			hc.Expires = harTime(c.Expires)
		}
		out = append(out, hc)
	}
	return out
}

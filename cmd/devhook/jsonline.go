package main

import (
	"strconv"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// The delivery line of listen --json is printed once per delivery, so it
// is written by hand rather than through encoding/json's reflection: the
// same bytes (TestDeliveryLineMatchesEncodingJSON compares them), at a
// fraction of the CPU.

// deliveryLine is the --json line of a delivery handled from the relay.
type deliveryLine struct {
	Event     string     `json:"event"`
	ID        string     `json:"id"`
	Method    string     `json:"method"`
	Path      string     `json:"path"`
	RunID     string     `json:"run_id,omitempty"`
	StatusV2  string     `json:"status_v2,omitempty"`
	Verdict   string     `json:"verdict"`
	Status    int        `json:"status"`
	Receiver  *int       `json:"receiver_status"`
	Duration  float64    `json:"duration_ms"`
	Queued    bool       `json:"queued,omitempty"`
	Cut       bool       `json:"cut,omitempty"`
	Duplicate bool       `json:"duplicate,omitempty"`
	Owed      bool       `json:"owed,omitempty"`
	Dropped   bool       `json:"dropped,omitempty"`
	Error     string     `json:"error,omitempty"`
	Hint      string     `json:"hint,omitempty"`
	Copies    []copyLine `json:"failed_copies,omitempty"`
	// Route took the delivery (listen --route): nil without routes.
	Route *devhook.Route `json:"route,omitempty"`
}

// appendJSON appends l as encoding/json would marshal it, and a newline.
func (l *deliveryLine) appendJSON(b []byte) []byte {
	b = append(b, `{"event":`...)
	b = appendJSONString(b, l.Event)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, l.ID)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, l.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, l.Path)
	if l.RunID != "" {
		b = append(b, `,"run_id":`...)
		b = appendJSONString(b, l.RunID)
	}
	if l.StatusV2 != "" {
		b = append(b, `,"status_v2":`...)
		b = appendJSONString(b, l.StatusV2)
	}
	b = append(b, `,"verdict":`...)
	b = appendJSONString(b, l.Verdict)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"receiver_status":`...)
	b = appendIntPtr(b, l.Receiver)
	b = append(b, `,"duration_ms":`...)
	b = appendJSONFloat(b, l.Duration)
	if l.Queued {
		b = append(b, `,"queued":true`...)
	}
	if l.Cut {
		b = append(b, `,"cut":true`...)
	}
	if l.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	if l.Owed {
		b = append(b, `,"owed":true`...)
	}
	if l.Dropped {
		b = append(b, `,"dropped":true`...)
	}
	if l.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, l.Error)
	}
	if l.Hint != "" {
		b = append(b, `,"hint":`...)
		b = appendJSONString(b, l.Hint)
	}
	if len(l.Copies) > 0 {
		b = append(b, `,"failed_copies":[`...)
		for i, c := range l.Copies {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"target":`...)
			b = appendJSONString(b, c.Target)
			b = append(b, `,"receiver_status":`...)
			b = appendIntPtr(b, c.Receiver)
			if c.Error != "" {
				b = append(b, `,"error":`...)
				b = appendJSONString(b, c.Error)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if l.Route != nil {
		b = appendRoute(append(b, `,"route":`...), l.Route)
	}
	return append(b, "}\n"...)
}

// appendRoute appends r as encoding/json would marshal it.
func appendRoute(b []byte, r *devhook.Route) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(r.Index), 10)
	b = append(b, `,"text":`...)
	b = appendJSONString(b, r.Text)
	if r.Target != "" {
		b = append(b, `,"target":`...)
		b = appendJSONString(b, r.Target)
	}
	return append(b, '}')
}

func appendIntPtr(b []byte, p *int) []byte {
	if p == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, int64(*p), 10)
}

// appendJSONFloat formats f as encoding/json does a float64.
func appendJSONFloat(b []byte, f float64) []byte {
	abs := f
	if abs < 0 {
		abs = -abs
	}
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it: HTML-safe, invalid UTF-8 as U+FFFD, U+2028 and U+2029
// escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

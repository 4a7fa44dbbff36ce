package inspector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// maxView bounds the text of one body that the detail view carries;
// the whole body stays downloadable.
const maxView = 1 << 20

// BodyView is a body decoded for the page.
type BodyView struct {
	Size        int    `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	UTF8        bool   `json:"utf8"`
	JSON        bool   `json:"json"`
	// Text is the body as text when it is UTF-8.
	Text string `json:"text,omitempty"`
	// Pretty is the indented JSON when the body is JSON.
	Pretty string `json:"pretty,omitempty"`
	// Hex is a hex dump when the body is not UTF-8.
	Hex string `json:"hex,omitempty"`
	// Truncated says Text, Pretty or Hex stop before the end of the body.
	Truncated bool `json:"truncated,omitempty"`
}

// NewBodyView decodes body for display.
func NewBodyView(body []byte, h http.Header) BodyView {
	v := BodyView{Size: len(body), ContentType: h.Get("Content-Type")}
	if len(body) == 0 {
		v.UTF8 = true
		return v
	}
	show := body
	if len(show) > maxView {
		show, v.Truncated = show[:maxView], true
	}
	if utf8.Valid(body) && !bytes.ContainsRune(body, 0) {
		v.UTF8 = true
		v.Text = string(show)
		if json.Valid(body) {
			v.JSON = true
			var buf bytes.Buffer
			if json.Indent(&buf, body, "", "  ") == nil {
				p := buf.Bytes()
				if len(p) > maxView {
					p = p[:maxView]
					for !utf8.Valid(p) {
						p = p[:len(p)-1]
					}
					v.Truncated = true
				}
				v.Pretty = string(p)
			}
		}
		if v.Truncated {
			for !utf8.Valid([]byte(v.Text)) {
				v.Text = v.Text[:len(v.Text)-1]
			}
		}
		return v
	}
	if len(show) > maxView/4 {
		show, v.Truncated = show[:maxView/4], true
	}
	v.Hex = hexDump(show)
	return v
}

// hexDump formats b as offset, 16 hex bytes and their printable ASCII.
func hexDump(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for off := 0; off < len(b); off += 16 {
		line := b[off:min(off+16, len(b))]
		fmt.Fprintf(&sb, "%08x  ", off)
		for i := range 16 {
			if i < len(line) {
				sb.WriteByte(digits[line[i]>>4])
				sb.WriteByte(digits[line[i]&0xf])
				sb.WriteByte(' ')
			} else {
				sb.WriteString("   ")
			}
			if i == 7 {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(" |")
		for _, c := range line {
			if c >= 0x20 && c < 0x7f {
				sb.WriteByte(c)
			} else {
				sb.WriteByte('.')
			}
		}
		sb.WriteString("|\n")
	}
	return sb.String()
}

func (s *Server) handleRequestBody(w http.ResponseWriter, r *http.Request) {
	d, err := s.delivery(r.PathValue("id"))
	// A partial delivery whose body reads (an attempt does not) downloads
	// it: only the body is asked for. One whose body does not is refused,
	// saying why (409), as its replay is.
	if pe := bodyUnreadable(d, err); pe != nil {
		s.fail(w, r, unreadablePart("download the body", pe))
		return
	}
	if err != nil && !partial(d, err) {
		s.fail(w, r, err)
		return
	}
	serveDownload(w, d.ID+"-request", d.Header.Get("Content-Type"), d.Body)
}

func (s *Server) handleAttemptBody(w http.ResponseWriter, r *http.Request) {
	d, err := s.delivery(r.PathValue("id"))
	if err != nil && !partial(d, err) {
		s.fail(w, r, err)
		return
	}
	seq, err := strconv.Atoi(r.PathValue("seq"))
	if err != nil {
		s.fail(w, r, devhook.Errorf(devhook.EINVALID, "attempt %q is not a number", r.PathValue("seq")))
		return
	}
	for _, a := range d.Attempts {
		if a.Seq == seq && a.ReadError != "" {
			pe := &devhook.PartialError{ID: d.ID, Attempts: []error{errors.New(a.ReadError)}}
			s.fail(w, r, unreadablePart(fmt.Sprintf("download the answer of attempt %d", seq), pe))
			return
		}
		if a.Seq == seq {
			serveDownload(w, fmt.Sprintf("%s-attempt-%d-response", d.ID, seq), a.Header.Get("Content-Type"), a.Body)
			return
		}
	}
	s.fail(w, r, devhook.Errorf(devhook.ENOTFOUND, "delivery %s has no attempt %d", d.ID, seq))
}

// serveDownload sends body as an attachment that the browser saves and
// never renders.
func serveDownload(w http.ResponseWriter, name, contentType string, body []byte) {
	ext := ".bin"
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			ext = ".json"
		case strings.HasPrefix(mt, "text/"):
			ext = ".txt"
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name + ext}))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

package export

// Deliveries as curl commands: the inspector's "Copy as curl" (one
// command) and `devhook deliveries export --format curl` (a script) are
// made here, so that both send the same bytes.
//
// # The script
//
// A POSIX sh script (#!/bin/sh, set -eu), one curl command per delivery in
// the order received, each after a comment line naming the delivery (one
// whose body could not be read from the store has the comment alone,
// saying why: it is not sent):
//
//	#!/bin/sh
//	# devhook deliveries export: 2 deliveries as curl commands …
//	set -eu
//	dir=$(dirname -- "$0")                       # only when a body is in a file
//
//	# 1/2 delivery 0190…: POST /hook?src=service, received 2026-…Z, 312 bytes
//	curl -q -sS -i --http1.1 --path-as-is -g -X 'POST' 'http://127.0.0.1:8080/hook?src=service' \
//	  -H 'Content-Type: application/json' \
//	  -H 'Service-Signature: t=…,v1=…' \
//	  -H 'Accept:' -H 'Expect:' -H 'User-Agent:' \
//	  --data-binary '{"event_type":"run.status",…}'
//	echo
//
// Each command reproduces the delivery as it arrived: its method, the URL
// (the receiver it was forwarded to, or --to with the delivery's path and
// query), every header it arrived with, repeated ones in their order,
// and the body byte for byte. Header names are in alphabetical order: the
// store keeps each name's values in order, not the order of the names.
//
// What curl would otherwise change: -q reads no ~/.curlrc; --http1.1, as
// devhook forwards; --path-as-is keeps dot segments and -g keeps [ ] { } of
// the path and query; 'Name:' removes a header curl adds by itself
// (Accept, User-Agent, the Content-Type of --data-binary, the
// Expect: 100-continue of a large body) when the delivery had none; an
// empty value is sent as 'Name;'. Host and Content-Length are curl's, from
// the URL and the body, as devhook's forward sends them; hop-by-hop
// headers (Connection, Transfer-Encoding, …) are not sent, as devhook's
// forward does not send them.
//
// Header lines and URLs that are text are single-quoted; one with other
// bytes (above 0x7f and not UTF-8) is written by printf ("$(printf '…')").
// A body that is text of up to InlineMax bytes is inline
// (--data-binary '…'); any other body (binary, larger, or starting with @,
// which curl would read as a file name) is a file beside the script
// (--data-binary @"$dir"/NAME) or, where there is no file (the inspector's
// command, a script on standard output), printf's output on curl's
// standard input (printf '…' | curl … --data-binary @-).
//
// # Signatures
//
// A command sends the service-signature the delivery arrived with: a
// receiver that checks it refuses it 5 minutes after its t, and the
// script says so. With Resign, each command signs its body when it runs,
// with the secret in DEVHOOK_SECRET (the script holds none): t is the
// time then, v1 the HMAC-SHA256 of "t.body" by openssl:
//
//	body() { printf '%s' '{"event_type":…}'; }
//	t=$(date +%s)000
//	v1=$({ printf '%s.' "$t"; body; } | openssl dgst -sha256 -hmac "$DEVHOOK_SECRET" -r | cut -d ' ' -f 1)
//	body | curl … -H "Service-Signature: t=$t,v1=$v1" … --data-binary @-

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// InlineMax is the largest text body a command holds inline. A longer one
// goes to a file or through printf: an argument of a program is limited
// (128 KiB on Linux), a builtin's is not.
const InlineMax = 64 << 10

// CurlOptions say how to write a curl script. The zero value sends each
// delivery to the receiver it was forwarded to, with its original
// signature, with every body in the script.
type CurlOptions struct {
	// To is where the commands send, as --to says: the delivery's path
	// and query are appended (devhook.TargetURL). Nil: each delivery's
	// receiver (Target).
	To *url.URL
	// Resign has each command sign its body when it runs, with the
	// secret in DEVHOOK_SECRET.
	Resign bool
	// BodyFiles is the script's file name: a body that is not inline goes
	// to a file beside it, named BodyFile(BodyFiles, id). Empty: such a
	// body is written by printf in the script.
	BodyFiles string
}

// Script is a curl script and the files of bodies it reads beside it.
type Script struct {
	Text  []byte
	Files []File
}

// File is a file beside the script: its name and its bytes.
type File struct {
	Name string
	Data []byte
}

// BodyFile is the name of the file beside script that holds delivery
// id's body: script.ID.body, with what is not a letter, a digit, a dot, a
// dash or an underscore in the id replaced by "_".
func BodyFile(script, id string) string {
	id = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, id)
	return script + "." + id + ".body"
}

// CurlScript writes ds, in the order received, as a script of curl
// commands (see the top of this file).
func CurlScript(ds []*devhook.Delivery, opt CurlOptions) (*Script, error) {
	ds = inOrder(ds)
	targets := make([]string, len(ds))
	for i, d := range ds {
		if d.BodyError != "" {
			continue // not sent (below)
		}
		t, err := Target(d, opt.To)
		if err != nil {
			return nil, err
		}
		targets[i] = t
	}
	var sb strings.Builder
	s := &Script{}
	for i, d := range ds {
		if d.BodyError != "" {
			// Its body could not be read from the store: a command would
			// send another body as this delivery's.
			fmt.Fprintf(&sb, "\n# %d/%d %s\n", i+1, len(ds), commentSafe(about(d)))
			sb.WriteString("#   not sent: its body cannot be read (" + commentSafe(d.BodyError) + ")\n")
			continue
		}
		src := sourceOf(d, opt.BodyFiles != "")
		if src.kind == bodyFile {
			src.file = BodyFile(opt.BodyFiles, d.ID)
			s.Files = append(s.Files, File{Name: src.file, Data: d.Body})
		}
		fmt.Fprintf(&sb, "\n# %d/%d %s\n", i+1, len(ds), commentSafe(about(d)))
		if !opt.Resign {
			if note := signatureNote(d); note != "" {
				sb.WriteString("#   " + note + "\n")
			}
		}
		writeCommand(&sb, d, targets[i], src, opt.Resign)
		sb.WriteString("echo\n")
	}
	s.Text = []byte(scriptHead(len(ds), len(s.Files) > 0, opt.Resign) + sb.String())
	return s, nil
}

// scriptHead is what a script starts with.
func scriptHead(n int, files, resign bool) string {
	var sb strings.Builder
	sb.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&sb, "# devhook deliveries export: %s as curl commands, each as it arrived:\n", plural(n, "delivery", "deliveries"))
	sb.WriteString("# method, path and query, every header (names in alphabetical order), the body byte for byte.\n")
	if resign {
		sb.WriteString("# Each request is signed when it is sent, with the secret in DEVHOOK_SECRET (openssl).\n")
	} else {
		sb.WriteString("# Each request carries the service-signature it arrived with: a receiver that checks it\n")
		sb.WriteString("# refuses it once its t is 5 minutes old. devhook deliveries export --resign writes a\n")
		sb.WriteString("# script that signs each request when it is sent, with the secret in DEVHOOK_SECRET.\n")
	}
	sb.WriteString("set -eu\n")
	if files {
		sb.WriteString("dir=$(dirname -- \"$0\")\n")
	}
	if resign {
		sb.WriteString(`: "${DEVHOOK_SECRET:?set DEVHOOK_SECRET to the signing secret of the webhook: each request is signed with it when it is sent}"` + "\n")
		sb.WriteString(`command -v openssl >/dev/null || { echo "$0: openssl signs the requests: install it" >&2; exit 1; }` + "\n")
	}
	return sb.String()
}

// CurlCommand returns one command that sends d to target as it arrived,
// with its original signature and its body in the command: the
// inspector's "Copy as curl".
func CurlCommand(d *devhook.Delivery, target string) string {
	var sb strings.Builder
	writeCommand(&sb, d, target, sourceOf(d, false), false)
	return sb.String()
}

// Where a command reads its body from.
const (
	bodyNone   = iota // no body and no Content-Length: no --data-binary
	bodyEmpty         // an empty body with a Content-Length: --data-binary ''
	bodyInline        // text: --data-binary '…'
	bodyFile          // a file beside the script
	bodyPrintf        // printf's output on standard input
)

type bodySource struct {
	kind int
	file string // bodyFile: its name beside the script
}

// sourceOf says where d's body is read from; files: a file beside the
// script may hold it.
func sourceOf(d *devhook.Delivery, files bool) bodySource {
	switch b := d.Body; {
	case len(b) == 0 && hasHeader(d.Header, "Content-Length"):
		return bodySource{kind: bodyEmpty}
	case len(b) == 0:
		return bodySource{kind: bodyNone}
	case len(b) <= InlineMax && b[0] != '@' && readable(string(b), true):
		return bodySource{kind: bodyInline}
	case files:
		return bodySource{kind: bodyFile}
	}
	return bodySource{kind: bodyPrintf}
}

// producer is a shell command that writes d's body on its output.
func (src bodySource) producer(d *devhook.Delivery) string {
	switch src.kind {
	case bodyInline:
		return "printf '%s' " + quote(string(d.Body))
	case bodyFile:
		return `cat -- "$dir"/` + quote(src.file)
	case bodyPrintf:
		if len(d.Body) > 0 && readable(string(d.Body), true) {
			return "printf '%s' " + quote(string(d.Body))
		}
		return "printf " + printfFormat(d.Body)
	}
	return ":"
}

// writeCommand writes the curl command of d to target, reading its body
// from src; resign: signed when it runs (the lines before it define body
// and v1).
func writeCommand(sb *strings.Builder, d *devhook.Delivery, target string, src bodySource, resign bool) {
	sigName := signatureName(d.Header)
	piped := src.kind == bodyPrintf || (resign && src.kind != bodyNone)
	if resign {
		sb.WriteString("body() { " + src.producer(d) + "; }\n")
		sb.WriteString("t=$(date +%s)000\n")
		sb.WriteString(`v1=$({ printf '%s.' "$t"; body; } | openssl dgst -sha256 -hmac "$DEVHOOK_SECRET" -r | cut -d ' ' -f 1)` + "\n")
		sb.WriteString(`: "${v1:?openssl did not sign the body}"` + "\n")
		if piped {
			sb.WriteString("body | ")
		}
	} else if piped {
		sb.WriteString(src.producer(d) + " | ")
	}
	sb.WriteString("curl -q -sS -i --http1.1 --path-as-is -g ")
	if d.Method == http.MethodHead {
		sb.WriteString("--head")
	} else {
		sb.WriteString("-X " + word(d.Method))
	}
	sb.WriteString(" " + word(target))
	names := make([]string, 0, len(d.Header)+1)
	for k := range d.Header {
		if !leaveOut(k) && !(resign && k == sigName) {
			names = append(names, k)
		}
	}
	if resign {
		names = append(names, sigName)
	}
	slices.Sort(names)
	for _, k := range names {
		if resign && k == sigName {
			sb.WriteString(" \\\n  -H \"" + k + `: t=$t,v1=$v1"`)
			continue
		}
		for _, v := range d.Header[k] {
			line := k + ": " + v
			if v == "" {
				line = k + ";" // curl's way to send an empty value
			}
			sb.WriteString(" \\\n  -H " + word(line))
		}
	}
	// What curl adds by itself, when the delivery had none.
	var remove []string
	for _, k := range []string{"Accept", "Content-Type", "Expect", "User-Agent"} {
		if !hasHeader(d.Header, k) {
			remove = append(remove, "-H '"+k+":'")
		}
	}
	if len(remove) > 0 {
		sb.WriteString(" \\\n  " + strings.Join(remove, " "))
	}
	switch {
	case piped:
		sb.WriteString(" \\\n  --data-binary @-")
	case src.kind == bodyEmpty:
		sb.WriteString(" \\\n  --data-binary ''")
	case src.kind == bodyInline:
		sb.WriteString(" \\\n  --data-binary " + quote(string(d.Body)))
	case src.kind == bodyFile:
		sb.WriteString(" \\\n  --data-binary @\"$dir\"/" + quote(src.file))
	}
	sb.WriteString("\n")
}

// leaveOut reports whether header name is not given to curl: hop-by-hop
// headers, which devhook's forward does not send either, and Host and
// Content-Length, which curl sets from the URL and the body.
func leaveOut(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer",
		"Upgrade", "Proxy-Authorization", "Proxy-Authenticate", "Host", "Content-Length":
		return true
	}
	return false
}

// hasHeader reports whether h has name, in any case.
func hasHeader(h http.Header, name string) bool {
	for k := range h {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// signatureName is the name h has the signature under, or its canonical
// name when it has none.
func signatureName(h http.Header) string {
	for k := range h {
		if strings.EqualFold(k, devhook.SignatureHeader) {
			return k
		}
	}
	return http.CanonicalHeaderKey(devhook.SignatureHeader)
}

// about is the comment line of a delivery.
func about(d *devhook.Delivery) string {
	s := "delivery " + d.ID + ": " + d.Method + " " + d.Path
	if d.RawQuery != "" {
		s += "?" + d.RawQuery
	}
	s += ", received " + d.ReceivedAt.UTC().Format(time.RFC3339Nano)
	if d.BodyError != "" {
		return s + ", its body unreadable"
	}
	return s + ", " + plural(len(d.Body), "byte", "bytes")
}

// signatureNote says when the signature d arrived with stops being
// accepted, or "" when it has none that parses.
func signatureNote(d *devhook.Delivery) string {
	p, err := signature.Parse(d.Header.Get(devhook.SignatureHeader))
	if err != nil {
		return ""
	}
	t := time.UnixMilli(p.T).UTC()
	return "signed at " + t.Format(time.RFC3339Nano) + ": a receiver that checks the signature refuses it after " + t.Add(signature.Window).Format(time.RFC3339)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

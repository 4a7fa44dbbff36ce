package main

import (
	"io"
	"os"
)

// ANSI colours of the terminal lines.
const (
	colorNone   = ""
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorRed    = "\x1b[31m"
	colorReset  = "\x1b[0m"
)

// useColor decides whether output to w is coloured: only on a terminal,
// never with --json or when NO_COLOR is set to anything
// (https://no-color.org). isTerminal is injected so that the decision is
// tested without a terminal.
func useColor(w io.Writer, asJSON bool, getenv func(string) string, isTerminal func(io.Writer) bool) bool {
	if asJSON || getenv("NO_COLOR") != "" || getenv("TERM") == "dumb" {
		return false
	}
	return isTerminal(w)
}

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// paint wraps s in colour c when the printer colours.
func (p *printer) paint(c, s string) string {
	if !p.color || c == colorNone {
		return s
	}
	return c + s + colorReset
}

// verdictColor: green for a valid signature, yellow when not checked,
// red for a failure.
func verdictColor(v string) string {
	switch v {
	case "ok":
		return colorGreen
	case "unchecked", "":
		return colorYellow
	}
	return colorRed
}

// statusColor: green 2xx, yellow 3xx, red 4xx, 5xx and none.
func statusColor(status int) string {
	switch {
	case status >= 200 && status < 300:
		return colorGreen
	case status >= 300 && status < 400:
		return colorYellow
	}
	return colorRed
}

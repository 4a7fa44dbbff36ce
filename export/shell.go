package export

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// How the curl scripts quote what they send. POSIX sh (dash, bash, zsh,
// busybox ash) is the target: no $'…'.
//
// A single-quoted word is passed on byte for byte, NUL aside, whatever it
// holds: only ' itself needs a way out ('\''). Scripts keep single quotes
// for text a reader can look at (valid UTF-8 without control bytes other
// than tab, and newline and carriage return in a body) and spell every
// other byte as an octal escape of printf's format, a shell builtin with
// no length limit, which writes NUL and bytes above 0x7f as they are.

// quote returns s as one single-quoted shell word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// readable reports whether s can stand in a script as it is: valid UTF-8
// with no control byte other than tab, and newline and carriage return
// when lines is true (a body; a header line has none).
func readable(s string, lines bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\t':
		case (c == '\n' || c == '\r') && lines:
		case c < 0x20 || c == 0x7f:
			return false
		}
	}
	return true
}

// printfFormat returns a single-quoted printf format that writes b byte
// for byte: printable ASCII as itself (% and \ doubled), every other byte
// as a three-digit octal escape.
func printfFormat(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b)*2 + 2)
	sb.WriteByte('\'')
	for _, c := range b {
		switch {
		case c == '\'':
			sb.WriteString(`'\''`)
		case c == '%':
			sb.WriteString("%%")
		case c == '\\':
			sb.WriteString(`\\`)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			o := strconv.FormatUint(uint64(c), 8)
			sb.WriteString(`\` + strings.Repeat("0", 3-len(o)) + o)
		}
	}
	sb.WriteByte('\'')
	return sb.String()
}

// word returns s as one shell word: single-quoted when it is readable,
// else the output of printf, in double quotes ("$(printf '…')"). Command
// substitution drops trailing newlines, so s must not end in one (a
// header line never does).
func word(s string) string {
	if readable(s, false) {
		return quote(s)
	}
	return `"$(printf ` + printfFormat([]byte(s)) + `)"`
}

// commentSafe returns s for a comment line: control bytes and invalid
// UTF-8 become "?", so that nothing it holds ends the comment.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

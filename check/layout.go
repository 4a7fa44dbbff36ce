package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf16"
)

// A layout is how one language's JSON encoder writes a value it parsed:
// a handler that verifies JSON it parsed and encoded again accepts a
// correctly signed body only when the body is already in its encoder's
// layout. The three layouts differ from each other and from the service's
// compact body in at least one byte of the suite's text body, so which of
// them a handler accepts names its encoder.
type layout struct {
	itemSep, keySep string
	sortKeys        bool // keys in byte order (Go's maps)
	asciiOnly       bool // non-ASCII as \uXXXX, astral as a surrogate pair (Python)
	escapeHTML      bool // <, >, & and U+2028, U+2029 as \uXXXX (Go)
}

// The layouts of the suite's re-encoding cases: Python's json.dumps with
// its defaults; JavaScript's JSON.stringify (compact, key order kept,
// UTF-8 as is); Go's json.Marshal of a map[string]any.
func layoutPython() layout { return layout{itemSep: ", ", keySep: ": ", asciiOnly: true} }
func layoutJS() layout     { return layout{itemSep: ",", keySep: ":"} }

// layoutPythonUTF8 is json.dumps with ensure_ascii=False: Python's
// separators, non-ASCII as it is.
func layoutPythonUTF8() layout { return layout{itemSep: ", ", keySep: ": "} }
func layoutGoMap() layout {
	return layout{itemSep: ",", keySep: ":", sortKeys: true, escapeHTML: true}
}

// relayout decodes body, keeping its keys' order and its numbers' text,
// and writes it again in layout l. Numbers keep their text: the suite's
// bodies hold integers only, which every encoder writes alike.
func relayout(body []byte, l layout) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var b bytes.Buffer
	if err := l.value(d, &b); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("relayout: data after the JSON value")
	}
	return b.Bytes(), nil
}

// member is one key and its value, already written.
type member struct {
	key   string
	value []byte
}

func (l layout) value(d *json.Decoder, b *bytes.Buffer) error {
	tok, err := d.Token()
	if err != nil {
		return fmt.Errorf("relayout: %w", err)
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			var ms []member
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return fmt.Errorf("relayout: %w", err)
				}
				var vb bytes.Buffer
				if err := l.value(d, &vb); err != nil {
					return err
				}
				ms = append(ms, member{k.(string), vb.Bytes()})
			}
			if _, err := d.Token(); err != nil { // }
				return fmt.Errorf("relayout: %w", err)
			}
			if l.sortKeys {
				slices.SortStableFunc(ms, func(a, b member) int {
					switch {
					case a.key < b.key:
						return -1
					case a.key > b.key:
						return 1
					}
					return 0
				})
			}
			b.WriteByte('{')
			for i, m := range ms {
				if i > 0 {
					b.WriteString(l.itemSep)
				}
				l.str(b, m.key)
				b.WriteString(l.keySep)
				b.Write(m.value)
			}
			b.WriteByte('}')
		case '[':
			b.WriteByte('[')
			for i := 0; d.More(); i++ {
				if i > 0 {
					b.WriteString(l.itemSep)
				}
				if err := l.value(d, b); err != nil {
					return err
				}
			}
			if _, err := d.Token(); err != nil { // ]
				return fmt.Errorf("relayout: %w", err)
			}
			b.WriteByte(']')
		}
	case string:
		l.str(b, v)
	case json.Number:
		b.WriteString(v.String())
	case bool:
		fmt.Fprint(b, v)
	case nil:
		b.WriteString("null")
	}
	return nil
}

// str writes s quoted as the layout's encoder quotes it. s is valid UTF-8:
// the decoder replaced invalid bytes.
func (l layout) str(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case l.escapeHTML && (r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029):
			fmt.Fprintf(b, `\u%04x`, r)
		case l.asciiOnly && r >= 0x7f && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
		case l.asciiOnly && r >= 0x7f:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

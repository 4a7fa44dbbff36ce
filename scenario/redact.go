package scenario

// Redaction replaces what JSON paths name in the request bodies with
// pseudonyms, so that a scenario can be shared without the run ids,
// application ids or anything else a user would rather not.
//
// Paths: $ is the body; .name or ['name'] or ["name"] a member; [N] an
// array element (0-based); .* or [*] every member or element; ..name,
// ..* or ..[N] the same at any depth ($..run_id: every run_id).
//
// Pseudonyms: each distinct value gets one, the same in every delivery of
// the file, numbered in the order the values first appear (delivery order,
// then position in the body), so that the same deliveries give the same
// file. A string becomes "redacted-<name>-<n>", <name> the path's last
// member name (run_id) and <n> counting the distinct values under that
// name; a number becomes the number <n>, counting distinct numbers; an
// object, array, true, false or null becomes a string as for strings.
//
// A redacted string (of 4 bytes or more) is also replaced wherever else it
// appears in the file, as all or part of a string: in other members of
// the bodies, in the receiver's recorded answers (which often echo the run
// id), in paths, queries and header values, and in bodies that are not
// JSON; member and header names are left alone. Shorter strings, and numbers, are replaced only where a path
// names them: a path naming "ok" must not rewrite every "ok" of the file.
//
// Only the bytes of the values that change are rewritten: the members'
// order, the spacing and every other byte of a body stay as received. A
// string that changes is written back as Go's encoding/json writes a
// string, without HTML escaping.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// spreadMin is the shortest redacted string also replaced where no path
// names it.
const spreadMin = 4

type pathStep struct {
	recursive bool   // ..: at any depth
	wild      bool   // * : every member or element
	name      string // a member, when not wild and index < 0
	index     int    // an element, or -1
}

type jsonPath struct {
	text  string
	steps []pathStep
	label string // the last member name, for pseudonyms
}

// CheckRedact returns the error Build would return for these redaction
// paths, or nil when each is a path of the form above: a caller that
// takes paths from a user (the inspector's ?redact=) tells their mistake
// from a failure with it.
func CheckRedact(paths []string) error {
	_, err := parsePaths(paths)
	return err
}

func parsePaths(texts []string) ([]jsonPath, error) {
	var ps []jsonPath
	for _, t := range texts {
		p, err := parsePath(t)
		if err != nil {
			return nil, fmt.Errorf("redaction path %q: %w", t, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// parsePath reads a JSON path of the subset described above.
func parsePath(text string) (jsonPath, error) {
	p := jsonPath{text: text}
	if !strings.HasPrefix(text, "$") {
		return p, errors.New("a JSON path starts with $ (such as $.data.run_id)")
	}
	s := text[1:]
	for len(s) > 0 {
		st := pathStep{index: -1}
		switch {
		case strings.HasPrefix(s, ".."):
			st.recursive = true
			s = s[2:]
			if strings.HasPrefix(s, "[") {
				break
			}
			fallthrough
		case strings.HasPrefix(s, "."):
			s = strings.TrimPrefix(s, ".")
			if !st.recursive && strings.HasPrefix(s, ".") {
				return p, errors.New("an empty member name")
			}
			if strings.HasPrefix(s, "*") {
				st.wild, s = true, s[1:]
				p.steps = append(p.steps, st)
				continue
			}
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return p, errors.New("an empty member name")
			}
			st.name, s = s[:end], s[end:]
			p.label = st.name
			p.steps = append(p.steps, st)
			continue
		case strings.HasPrefix(s, "["):
		default:
			return p, fmt.Errorf("unexpected %q: after $ come .name, ['name'], [N], [*] or ..name", clip(s))
		}
		// A bracket step.
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return p, errors.New("a [ without its ]")
		}
		in := s[1:end]
		s = s[end+1:]
		switch {
		case in == "*":
			st.wild = true
		case len(in) >= 2 && (in[0] == '\'' || in[0] == '"') && in[len(in)-1] == in[0]:
			st.name = in[1 : len(in)-1]
			p.label = st.name
		default:
			n, err := strconv.Atoi(in)
			if err != nil || n < 0 {
				return p, fmt.Errorf("[%s] is not an index (0 or more), * or a quoted name", in)
			}
			st.index = n
		}
		p.steps = append(p.steps, st)
	}
	return p, nil
}

// node is a JSON value of a body and where it is.
type node struct {
	kind       byte // '{', '[', '"' string, '0' number, 'l' true, false or null
	start, end int
	keys       []string // an object's member names, in order
	kids       []*node
	str        string // a string's value
}

// parseTree reads body as one JSON value, or returns nil.
func parseTree(body []byte) *node {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	n, err := parseValue(dec, body)
	if err != nil {
		return nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil
	}
	return n
}

func parseValue(dec *json.Decoder, body []byte) (*node, error) {
	start := int(dec.InputOffset())
	for start < len(body) && strings.IndexByte(" \t\r\n,:", body[start]) >= 0 {
		start++
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &node{start: start}
	switch t := tok.(type) {
	case json.Delim:
		n.kind = byte(t)
		for dec.More() {
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k.(string))
			}
			kid, err := parseValue(dec, body)
			if err != nil {
				return nil, err
			}
			n.kids = append(n.kids, kid)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	case string:
		n.kind, n.str = '"', t
	case json.Number:
		n.kind = '0'
	default:
		n.kind = 'l'
	}
	n.end = int(dec.InputOffset())
	return n, nil
}

// match returns the values p names under root.
func (p jsonPath) match(root *node) []*node {
	cur := []*node{root}
	for _, st := range p.steps {
		var next []*node
		for _, n := range cur {
			if st.recursive {
				n.walk(func(d *node) { next = append(next, st.apply(d)...) })
			} else {
				next = append(next, st.apply(n)...)
			}
		}
		cur = next
	}
	return cur
}

func (st pathStep) apply(n *node) []*node {
	var out []*node
	switch n.kind {
	case '{':
		for i, k := range n.keys {
			if st.wild || (st.index < 0 && k == st.name) {
				out = append(out, n.kids[i])
			}
		}
	case '[':
		switch {
		case st.wild:
			out = append(out, n.kids...)
		case st.index >= 0 && st.index < len(n.kids):
			out = append(out, n.kids[st.index])
		}
	}
	return out
}

// walk calls f for n and every value inside it, in document order.
func (n *node) walk(f func(*node)) {
	f(n)
	for _, k := range n.kids {
		k.walk(f)
	}
}

// redactor hands out pseudonyms.
type redactor struct {
	pseudonym map[string][]byte // a value's key → its pseudonym, as JSON
	strs      map[string]string // a redacted string → its pseudonym
	counts    map[string]int    // per label
	numbers   int
}

// key identifies a value: the same value in another body gets the same key.
func key(n *node, body []byte) string {
	raw := body[n.start:n.end]
	switch n.kind {
	case '"':
		return "s" + n.str
	case '0':
		return "n" + string(raw)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "j" + string(raw)
	}
	return "j" + b.String()
}

func (r *redactor) assign(n *node, body []byte, label string) {
	k := key(n, body)
	if _, ok := r.pseudonym[k]; ok {
		return
	}
	if n.kind == '0' {
		r.numbers++
		r.pseudonym[k] = []byte(strconv.Itoa(r.numbers))
		return
	}
	label = strings.Map(func(c rune) rune {
		if c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return c
		}
		return -1
	}, label)
	r.counts[label]++
	p := "redacted-" + strconv.Itoa(r.counts[label])
	if label != "" {
		p = "redacted-" + label + "-" + strconv.Itoa(r.counts[label])
	}
	raw, _ := marshal(p)
	r.pseudonym[k] = raw
	if n.kind == '"' {
		r.strs[n.str] = p
	}
}

// redact applies paths to s's request bodies and spreads the redacted
// strings over the rest of the file. It returns a warning for each path
// that named nothing.
func redact(s *Scenario, paths []jsonPath) []string {
	if len(paths) == 0 {
		return nil
	}
	r := &redactor{pseudonym: map[string][]byte{}, strs: map[string]string{}, counts: map[string]int{}}
	trees := make([]*node, len(s.Deliveries))
	named := make([]map[*node]bool, len(s.Deliveries))
	hits := make([]int, len(paths))
	for i := range s.Deliveries {
		body := s.Deliveries[i].Body
		root := parseTree(body)
		if root == nil {
			continue
		}
		trees[i] = root
		label := map[*node]string{}
		var found []*node
		for j, p := range paths {
			for _, n := range p.match(root) {
				if _, dup := label[n]; !dup {
					label[n] = p.label
					found = append(found, n)
				}
				hits[j]++
			}
		}
		// Outermost first, in document order: a value inside a redacted
		// one goes with it.
		slices.SortFunc(found, func(a, b *node) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end)) })
		named[i] = map[*node]bool{}
		end := -1
		for _, n := range found {
			if n.start < end {
				continue
			}
			end = n.end
			named[i][n] = true
			r.assign(n, body, label[n])
		}
	}
	var warnings []string
	for j, p := range paths {
		if hits[j] == 0 {
			warnings = append(warnings, fmt.Sprintf("%s matched nothing in the %d deliveries' bodies", p.text, len(s.Deliveries)))
		}
	}

	text, web := r.replacers()
	for i := range s.Deliveries {
		e := &s.Deliveries[i]
		e.Body = r.rewrite(e.Body, trees[i], named[i], text)
		if e.Recorded != nil {
			e.Recorded.Body = r.rewrite(e.Recorded.Body, parseTree(e.Recorded.Body), nil, text)
		}
		if web != nil {
			e.Path, e.Query = web.Replace(e.Path), web.Replace(e.Query)
		}
		if text != nil {
			for _, vs := range e.Header {
				for k, v := range vs {
					vs[k] = text.Replace(v)
				}
			}
		}
	}
	return warnings
}

// replacers return the replacement of redacted strings in text, and in
// paths and queries (where they may be escaped); nil when there is none.
func (r *redactor) replacers() (text, web *strings.Replacer) {
	var olds []string
	for s := range r.strs {
		if len(s) >= spreadMin {
			olds = append(olds, s)
		}
	}
	if len(olds) == 0 {
		return nil, nil
	}
	// Longest first, so that a value inside another does not cut it up.
	slices.SortFunc(olds, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), cmp.Compare(a, b)) })
	var pairs, webPairs []string
	seen := map[string]bool{}
	for _, s := range olds {
		p := r.strs[s]
		pairs = append(pairs, s, p)
		for _, form := range []string{s, url.PathEscape(s), url.QueryEscape(s)} {
			if !seen[form] {
				seen[form] = true
				webPairs = append(webPairs, form, p)
			}
		}
	}
	return strings.NewReplacer(pairs...), strings.NewReplacer(webPairs...)
}

// rewrite returns body with the named values replaced by their pseudonyms
// and the redacted strings replaced in every other string. A body that is
// not JSON (root nil) gets the second as text.
func (r *redactor) rewrite(body []byte, root *node, named map[*node]bool, text *strings.Replacer) []byte {
	if root == nil {
		if text == nil {
			return body
		}
		return []byte(text.Replace(string(body)))
	}
	var out bytes.Buffer
	last := 0
	edit := func(n *node, with []byte) {
		out.Write(body[last:n.start])
		out.Write(with)
		last = n.end
	}
	var visit func(n *node)
	visit = func(n *node) {
		if named[n] {
			edit(n, r.pseudonym[key(n, body)])
			return
		}
		if n.kind == '"' && text != nil {
			if s := text.Replace(n.str); s != n.str {
				raw, _ := marshal(s)
				edit(n, raw)
			}
			return
		}
		for _, k := range n.kids {
			visit(k)
		}
	}
	visit(root)
	if last == 0 {
		return body
	}
	out.Write(body[last:])
	return out.Bytes()
}

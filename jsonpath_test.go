package devhook_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/devhook/devhook"
)

// lookupRef is LookupJSON's specification, with encoding/json: the body
// decoded into maps (last of repeated keys wins), numbers as written, the
// path followed key by key, an index into an array by a decimal key. It
// returns the value's text and kind ('s' string, 'l' literal, 'c' object
// or array), or found false.
func lookupRef(body []byte, path string) (text string, kind byte, found bool) {
	if !json.Valid(body) {
		return "", 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", 0, false
	}
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return "", 0, false
			}
		case []any:
			n, err := strconv.Atoi(k)
			if err != nil || n < 0 || n >= len(x) || strconv.Itoa(n) != k {
				return "", 0, false
			}
			v = x[n]
		default:
			return "", 0, false
		}
	}
	switch x := v.(type) {
	case string:
		return x, 's', true
	case json.Number:
		return string(x), 'l', true
	case bool:
		return strconv.FormatBool(x), 'l', true
	case nil:
		return "null", 'l', true
	}
	return "", 'c', true
}

var lookupPaths = []string{"a", "a.b", "a.b.c", "items.0.id", "items.1", "0", "0.x", "data.run_id", "n", "t", "z", "a.0", "é", "k\"q"}

var lookupBodies = []string{
	`{"a":{"b":{"c":"deep"}},"items":[{"id":7},{"id":"x"}],"n":1.50,"t":true,"z":null}`,
	`  {"a" : 1 , "a" : {"b":2}}  `,
	`{"a":{"b":1},"a":3}`,
	`{"a":[10,{"c":1}],"items":[]}`,
	`[{"x":"first"},2]`,
	`{"data":{"run_id":"r\u0031"},"é":"accent","k\"q":"quote"}`,
	`{"a":{"b":"x\"y"}}`,
	`{"items":[{"id":1}],"items":{"0":{"id":"obj"}}}`,
	`{"a":1`,
	`{"a":1}x`,
	``,
	`"top"`,
	`{"a":{"b":"\u00e9"}}`,
	"{\"a\":{\"b\":\"\xff\"}}",
	`{"t":false,"n":-0,"z":"null"}`,
}

func TestLookupJSON_MatchesReference(t *testing.T) {
	for _, body := range lookupBodies {
		checkLookup(t, []byte(body))
	}
}

func checkLookup(t *testing.T, body []byte) {
	t.Helper()
	paths := make([]devhook.JSONPath, len(lookupPaths))
	for i, s := range lookupPaths {
		p, err := devhook.ParseJSONPath(s)
		if err != nil {
			t.Fatal(err)
		}
		paths[i] = p
	}
	out := make([]devhook.JSONValue, len(paths))
	valid := devhook.LookupJSON(body, paths, out)
	if valid != json.Valid(body) {
		t.Fatalf("LookupJSON(%q) valid = %v, json.Valid says %v", body, valid, !valid)
	}
	for i, s := range lookupPaths {
		text, kind, found := lookupRef(body, s)
		if out[i].Found() != found {
			t.Fatalf("LookupJSON(%q) %s found = %v, want %v (raw %q)", body, s, out[i].Found(), found, out[i].Raw())
		}
		if !found {
			continue
		}
		switch kind {
		case 'c':
			if out[i].TextIs(string(out[i].Raw()), false) {
				t.Fatalf("LookupJSON(%q) %s: an object or array has no text, yet matched", body, s)
			}
		case 's':
			if !out[i].TextIs(text, false) || !out[i].TextIs(text, true) {
				t.Fatalf("LookupJSON(%q) %s = %q, want the string %q", body, s, out[i].Raw(), text)
			}
		case 'l':
			if !out[i].TextIs(text, false) || out[i].TextIs(text, true) {
				t.Fatalf("LookupJSON(%q) %s = %q, want the literal %s (and no string)", body, s, out[i].Raw(), text)
			}
		}
		if out[i].TextIs(text+"x", false) {
			t.Fatalf("LookupJSON(%q) %s = %q matches %q", body, s, out[i].Raw(), text+"x")
		}
	}
}

func FuzzLookupJSON(f *testing.F) {
	for _, b := range lookupBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkLookup(t, body) })
}

func TestParseJSONPath_Errors(t *testing.T) {
	for _, s := range []string{"", "a..b", ".a", "a."} {
		if _, err := devhook.ParseJSONPath(s); err == nil {
			t.Errorf("ParseJSONPath(%q): no error", s)
		}
	}
	p, err := devhook.ParseJSONPath("data.items.0.id")
	if err != nil || p.String() != "data.items.0.id" {
		t.Fatalf("ParseJSONPath: %v %v", p, err)
	}
}

// TestLookupJSON_ManyPaths looks up MaxJSONPaths paths at once.
func TestLookupJSON_ManyPaths(t *testing.T) {
	var body bytes.Buffer
	body.WriteString("{")
	paths := make([]devhook.JSONPath, devhook.MaxJSONPaths)
	for i := range paths {
		if i > 0 {
			body.WriteString(",")
		}
		body.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
		paths[i], _ = devhook.ParseJSONPath("k" + strconv.Itoa(i))
	}
	body.WriteString("}")
	out := make([]devhook.JSONValue, len(paths))
	if !devhook.LookupJSON(body.Bytes(), paths, out) {
		t.Fatal("not valid")
	}
	for i := range out {
		if !out[i].TextIs(strconv.Itoa(i), false) {
			t.Fatalf("path %d = %q", i, out[i].Raw())
		}
	}
}

func BenchmarkLookupJSON(b *testing.B) {
	body := benchBody()
	p1, _ := devhook.ParseJSONPath("data.status_v2")
	p2, _ := devhook.ParseJSONPath("event_type")
	paths := []devhook.JSONPath{p1, p2}
	var out [2]devhook.JSONValue
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !devhook.LookupJSON(body, paths, out[:]) || !out[0].TextIs("succeeded", false) {
			b.Fatal("not found")
		}
	}
}

// BenchmarkLookupJSONRef is encoding/json with LookupJSON's behaviour.
func BenchmarkLookupJSONRef(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if text, _, _ := lookupRef(body, "data.status_v2"); text != "succeeded" {
			b.Fatal("not found")
		}
	}
}

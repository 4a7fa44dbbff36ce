package storage

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devhook/devhook"
)

// Delivery ids by prefix. A person types the start of an id, as git takes
// the start of a commit's hash: Resolve finds the one recorded delivery
// whose id starts with it. Ids are UUIDv7 strings, time-ordered, so those
// that share a prefix lie side by side in the list rows: a cursor seeks
// the prefix and reads on while keys have it. The first 12 hex digits of
// a UUIDv7 are its millisecond, so deliveries of the same minute share
// about the first 8: a unique prefix is usually 10 to 14 characters.
//
// A prefix is taken as typed, and also with the dashes of a UUID put in
// where a run of hex digits crosses them (0190a1b2c3 is 0190a1b2-c3), and
// in lower case: ids are written so.

// AmbiguousCandidates is how many of the deliveries an ambiguous prefix
// starts that its error names.
const AmbiguousCandidates = 5

// maxPrefixCount bounds how many ids sharing a prefix Resolve counts.
const maxPrefixCount = 10_000

// Resolve returns the id of the recorded delivery whose id is ref, or,
// when none is, of the only one whose id starts with ref. A ref that
// starts none is an error with code devhook.ENOTFOUND; one that starts
// several, devhook.ECONFLICT, naming a few of them with their times.
func (db *DB) Resolve(ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return "", devhook.Errorf(devhook.EINVALID, "no delivery id given")
	}
	forms := prefixForms(ref)
	var total int
	var first []devhook.Summary
	exact := ""
	err := db.view(func(v *view) error {
		summaries := v.tx.Bucket([]byte(bucketSummaries))
		for _, f := range forms {
			if validID("delivery", f) == nil && (summaries.Get([]byte(f)) != nil || v.deliveries.Get([]byte(f)) != nil || v.puts[f] != nil) {
				exact = f
				return nil
			}
		}
		seen := map[string]bool{}
		add := func(id, sv []byte) {
			if seen[string(id)] {
				return
			}
			seen[string(id)] = true
			total++
			if len(first) < AmbiguousCandidates {
				s := devhook.Summary{ID: string(id)}
				if p, err := v.summary(id, sv); err == nil && p != nil {
					if d, err := decodeSummary(p); err == nil {
						s = d
					}
				}
				first = append(first, s)
			}
		}
		for _, f := range forms {
			prefix := []byte(f)
			c := summaries.Cursor()
			for k, sv := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && total < maxPrefixCount; k, sv = c.Next() {
				add(k, sv)
			}
			for _, e := range v.newPuts("", "") {
				if bytes.HasPrefix(e.id, prefix) {
					add(e.id, e.summary)
				}
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("storage: find delivery %.200q: %w", ref, err)
	}
	switch {
	case exact != "":
		return exact, nil
	case total == 1:
		return first[0].ID, nil
	case total == 0:
		return "", devhook.Errorf(devhook.ENOTFOUND, "no delivery with id or prefix %.200q in %s", ref, filepath.Dir(db.path))
	}
	slices.SortFunc(first, func(a, b devhook.Summary) int { return strings.Compare(a.ID, b.ID) })
	return "", devhook.Errorf(devhook.ECONFLICT, "%s", ambiguous(ref, total, first))
}

// ambiguous says that ref starts total ids, naming some of them.
func ambiguous(ref string, total int, some []devhook.Summary) string {
	var b strings.Builder
	n := fmt.Sprint(total)
	if total >= maxPrefixCount {
		n = "more than " + n
	}
	fmt.Fprintf(&b, "%.200q starts the ids of %s deliveries; give more of the id (a full id, or a prefix only one has):", ref, n)
	for _, s := range some {
		fmt.Fprintf(&b, "\n  %s", s.ID)
		if !s.ReceivedAt.IsZero() {
			fmt.Fprintf(&b, "  %s  %s %s", s.ReceivedAt.Local().Format(time.DateTime), s.Method, s.Path)
		}
	}
	if total > len(some) {
		fmt.Fprintf(&b, "\n  … and %d more", total-len(some))
	}
	return b.String()
}

// prefixForms returns ref and the forms of it that ids may be written in:
// in lower case, and with a UUID's dashes put in, when it is hex digits.
func prefixForms(ref string) []string {
	forms := []string{ref}
	add := func(f string) {
		if !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	hex, dashes := true, false
	for _, c := range ref {
		switch {
		case c == '-':
			dashes = true
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			hex = false
		}
	}
	if !hex {
		return forms
	}
	low := strings.ToLower(ref)
	add(low)
	if !dashes && len(low) <= 32 {
		var b strings.Builder
		for i, c := range low {
			if i == 8 || i == 12 || i == 16 || i == 20 {
				b.WriteByte('-')
			}
			b.WriteRune(c)
		}
		add(b.String())
	}
	return forms
}

// Package export writes recorded deliveries in the forms other tools
// read: a shell script of curl commands that sends each one again byte for
// byte (curl.go, also the inspector's "Copy as curl"), and an HTTP Archive
// (HAR 1.2) of each attempt's request and the receiver's answer (har.go).
// The third form of `devhook deliveries export`, a scenario file, is the
// scenario package's (scenario.Export), so that it is byte for byte what
// `devhook scenario save` writes.
//
// Every form takes the deliveries in the order they were received
// (ReceivedAt, then id), whatever order they are named in.
package export

import (
	"cmp"
	"net/url"
	"path/filepath"
	"slices"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/internal/atomicfile"
)

// NoTargetError is the error of a delivery that has no receiver to send
// to: it was never forwarded, and no --to names one.
type NoTargetError struct{ ID string }

func (e *NoTargetError) Error() string {
	return "delivery " + e.ID + " was never forwarded, so there is no receiver to send it to"
}

// Target is the URL a delivery is sent to again: to, with the delivery's
// path and query appended as a forward appends them (devhook.TargetURL),
// or, when to is nil, the URL its first attempt called (the receiver it
// was forwarded to as it arrived, a route's target included; a drop
// called none: then the first attempt after it that did).
func Target(d *devhook.Delivery, to *url.URL) (string, error) {
	if to != nil {
		return devhook.TargetURL(to, d.Path, d.RawQuery), nil
	}
	for i := range d.Attempts {
		// A route's drop (listen --route 'MATCH -> drop') went nowhere.
		if a := &d.Attempts[i]; a.Kind != devhook.AttemptDrop && a.Target != "" {
			return a.Target, nil
		}
	}
	return "", &NoTargetError{ID: d.ID}
}

// inOrder returns ds in the order received: ReceivedAt, then id.
func inOrder(ds []*devhook.Delivery) []*devhook.Delivery {
	ds = slices.Clone(ds)
	slices.SortStableFunc(ds, func(a, b *devhook.Delivery) int {
		return cmp.Or(a.ReceivedAt.Compare(b.ReceivedAt), cmp.Compare(a.ID, b.ID))
	})
	return ds
}

// WriteFiles writes the script to path (executable) and its body files
// beside it, the bodies first, so that a script never names a file that
// is not there yet.
func (s *Script) WriteFiles(path string) error {
	dir := filepath.Dir(path)
	for _, f := range s.Files {
		if err := atomicfile.Write(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	return atomicfile.Write(path, s.Text, 0o755)
}

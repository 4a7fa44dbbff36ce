package devhook

import (
	"fmt"
	"strings"
)

// Damage is what the reads of a delivery store left out: records that
// fail their checks (damaged: a disk's or a copy's bytes changed), and
// records a newer devhook wrote, which this one does not read. A list
// skips them and shows the rest; it reports them with this.
type Damage struct {
	File    string `json:"file"`            // the store's file
	Damaged int    `json:"damaged"`         // records that fail their checks
	Newer   int    `json:"newer,omitempty"` // records of a format this devhook does not read
	// IDs are the deliveries they belong to, the first DamageIDs, as far
	// as their keys are readable; Unnamed counts the records whose key is
	// damaged too.
	IDs     []string `json:"ids,omitempty"`
	Unnamed int      `json:"unnamed,omitempty"`
}

// DamageIDs is how many delivery ids a Damage names at most.
const DamageIDs = 5

// Any reports whether anything was left out.
func (d Damage) Any() bool { return d.Damaged > 0 || d.Newer > 0 }

// Summary says what was left out and where: "1 damaged record in
// /data/deliveries.db (delivery ID)".
func (d Damage) Summary() string {
	var parts []string
	if d.Damaged > 0 {
		parts = append(parts, fmt.Sprintf("%d damaged %s", d.Damaged, plural(d.Damaged, "record", "records")))
	}
	if d.Newer > 0 {
		parts = append(parts, fmt.Sprintf("%d %s written by a newer devhook", d.Newer, plural(d.Newer, "record", "records")))
	}
	var of []string
	switch {
	case len(d.IDs) == 1:
		of = append(of, "delivery "+d.IDs[0])
	case len(d.IDs) >= DamageIDs:
		of = append(of, "deliveries "+strings.Join(d.IDs, ", ")+", …")
	case len(d.IDs) > 1:
		of = append(of, "deliveries "+strings.Join(d.IDs, ", "))
	}
	if d.Unnamed > 0 {
		of = append(of, fmt.Sprintf("%d whose %s damaged too", d.Unnamed, plural(d.Unnamed, "key is", "keys are")))
	}
	s := strings.Join(parts, " and ") + " in " + d.File
	if len(of) > 0 {
		s += " (" + strings.Join(of, "; ") + ")"
	}
	return s
}

// Advice says what to do about it.
func (d Damage) Advice() string {
	var parts []string
	if d.Damaged > 0 {
		parts = append(parts, fmt.Sprintf("the other deliveries read as before; to keep the file as evidence and start a new one, stop devhook and move it away (for example: mv %s %s.bad)", d.File, d.File))
	}
	if d.Newer > 0 {
		parts = append(parts, "upgrade devhook to read the records of a newer one")
	}
	return strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

package devhook_test

import (
	"strings"
	"testing"

	"github.com/devhook/devhook"
)

// What a list says it skipped: how many, of which kind, in which file,
// which deliveries, and what to do.
func TestDamage_Says(t *testing.T) {
	const f = "/data/deliveries.db"
	for _, c := range []struct {
		d       devhook.Damage
		summary string
		advice  []string
	}{
		{devhook.Damage{File: f, Damaged: 1, IDs: []string{"a"}},
			"1 damaged record in /data/deliveries.db (delivery a)", []string{"move it away", "mv /data/deliveries.db /data/deliveries.db.bad"}},
		{devhook.Damage{File: f, Damaged: 3, IDs: []string{"a"}, Unnamed: 2},
			"3 damaged records in /data/deliveries.db (delivery a; 2 whose keys are damaged too)", []string{"move it away"}},
		{devhook.Damage{File: f, Damaged: 1, Unnamed: 1},
			"1 damaged record in /data/deliveries.db (1 whose key is damaged too)", []string{"move it away"}},
		{devhook.Damage{File: f, Damaged: 9, IDs: []string{"a", "b", "c", "d", "e"}},
			"9 damaged records in /data/deliveries.db (deliveries a, b, c, d, e, …)", []string{"move it away"}},
		{devhook.Damage{File: f, Newer: 2, IDs: []string{"a", "b"}},
			"2 records written by a newer devhook in /data/deliveries.db (deliveries a, b)", []string{"upgrade devhook"}},
		{devhook.Damage{File: f, Damaged: 1, Newer: 1, IDs: []string{"a", "b"}},
			"1 damaged record and 1 record written by a newer devhook in /data/deliveries.db (deliveries a, b)", []string{"move it away", "upgrade devhook"}},
	} {
		if !c.d.Any() {
			t.Errorf("%+v: Any() = false", c.d)
		}
		if got := c.d.Summary(); got != c.summary {
			t.Errorf("Summary() = %q, want %q", got, c.summary)
		}
		for _, w := range c.advice {
			if !strings.Contains(c.d.Advice(), w) {
				t.Errorf("%+v: Advice() = %q, want it to say %q", c.d, c.d.Advice(), w)
			}
		}
		if c.d.Newer == 0 && strings.Contains(c.d.Advice(), "newer") || c.d.Damaged == 0 && strings.Contains(c.d.Advice(), "move") {
			t.Errorf("%+v: Advice() = %q says what does not apply", c.d, c.d.Advice())
		}
	}
	if (devhook.Damage{File: f}).Any() {
		t.Error("an empty Damage says something was skipped")
	}
}

package scenario_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
	"github.com/devhook/devhook/storage"
)

// The short run id listen's terminal shows selects the run it names, in a
// real store; two runs sharing a short id are an error naming both.
func TestSelect_ShortRunID(t *testing.T) {
	db, err := storage.Open(filepath.Join(t.TempDir(), "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	runs := map[string]string{
		"v4":      "3f2a9c1e-5b7d-4e2f-9a1b-2c3d4e5f6a7b",
		"v7":      "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		"twin1":   "77777777-1111-4e2f-9a1b-2c3d4e5f6a7b",
		"twin2":   "77777777-2222-4e2f-9a1b-2c3d4e5f6a7b",
		"v7-same": "0190a1b2-c3d4-7e60-8a9b-0c1d2e3f4a5c", // the same millisecond as v7
	}
	want := map[string][]string{}
	for _, name := range []string{"v4", "v7", "twin1", "twin2", "v7-same"} {
		for _, d := range runDeliveries(t, runs[name]) {
			d.ID = uuid.Must(uuid.NewV7()).String()
			if _, err := db.PutDelivery(d); err != nil {
				t.Fatal(err)
			}
			want[name] = append(want[name], d.ID)
		}
	}
	ctx := context.Background()
	for _, name := range []string{"v4", "v7", "v7-same"} {
		short := devhook.ShortRunID(runs[name])
		ids, err := scenario.Select(ctx, listOf(db), scenario.Selection{RunID: short})
		if err != nil || strings.Join(ids, ",") != strings.Join(want[name], ",") {
			t.Errorf("--run %s (%s): %v %v, want %v", short, name, ids, err, want[name])
		}
		if full, err := scenario.ResolveRunID(ctx, listOf(db), short); err != nil || full != runs[name] {
			t.Errorf("ResolveRunID(%s) = %s, %v; want %s", short, full, err, runs[name])
		}
	}
	// The whole id still works.
	if ids, err := scenario.Select(ctx, listOf(db), scenario.Selection{RunID: runs["v4"]}); err != nil || len(ids) != 3 {
		t.Errorf("--run with the whole id: %v %v", ids, err)
	}
	_, err = scenario.Select(ctx, listOf(db), scenario.Selection{RunID: "77777777"})
	if err == nil || !strings.Contains(err.Error(), runs["twin1"]) || !strings.Contains(err.Error(), runs["twin2"]) {
		t.Errorf("an ambiguous short id: %v, want both runs named", err)
	}
	_, err = scenario.Select(ctx, listOf(db), scenario.Selection{RunID: "deadbeef"})
	if err == nil || !strings.Contains(err.Error(), "no delivery of run deadbeef") {
		t.Errorf("an unknown short id: %v", err)
	}
}

func listOf(db *storage.DB) func(context.Context, devhook.Filter) ([]devhook.Summary, error) {
	return func(_ context.Context, f devhook.Filter) ([]devhook.Summary, error) { return db.List(f) }
}

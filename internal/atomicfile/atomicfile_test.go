package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/devhook/devhook/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "report.xml")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || string(b) != "new" || fi.Mode().Perm() != 0o644 {
		t.Fatalf("%q %v %v", b, fi.Mode(), err)
	}
	// A failed write (the directory is gone) leaves no temporary file.
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), []byte("y"), 0o644); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("left in the directory: %v", es)
	}
}

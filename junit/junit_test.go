package junit_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/devhook/devhook/junit"
	"github.com/devhook/devhook/junit/junittest"
)

// Nothing could run: one case, an error, as a real consumer reads it.
func TestError_ReadByJunitparser(t *testing.T) {
	file := filepath.Join(t.TempDir(), "check.xml")
	if err := junit.Error("devhook check http://x", "reach the handler", errors.New("cannot reach")).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	if s := junittest.Read(t, file)[0]; s.Tests != 1 || s.Errors != 1 || s.Cases[0].Result[0].Kind != "Error" || s.Cases[0].Result[0].Message != "cannot reach" {
		t.Errorf("an error suite read as %+v", s)
	}
}

package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// TestGoInstallAtVersion does what the README's install line does, go
// install github.com/devhook/devhook/cmd/devhook@VERSION, against a module
// proxy on disk that serves this checkout as that version (the module's
// dependencies come from the module cache: no network), and checks that
// the installed devhook version prints the module version. It also fails
// when go.mod gains a replace directive, which go install …@version refuses.
func TestGoInstallAtVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds devhook through go install: not with -short")
	}
	const (
		path    = "github.com/devhook/devhook"
		version = "v0.0.0-installtest"
	)
	proxy := t.TempDir()
	dir := filepath.Join(proxy, path, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"list":            version + "\n",
		version + ".info": fmt.Sprintf(`{"Version":%q,"Time":"2026-11-25T00:00:00Z"}`, version),
		version + ".mod":  string(mod),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := zip.CreateFromDir(zf, module.Version{Path: path, Version: version}, ".."); err != nil {
		t.Fatalf("module zip of this checkout: %v", err)
	}
	zf.Close()

	gobin := t.TempDir()
	cmd := exec.Command("go", "install", path+"/cmd/devhook@"+version)
	cmd.Env = append(os.Environ(),
		"GOBIN="+gobin,
		"GOPROXY=file://"+filepath.ToSlash(proxy),
		"GOSUMDB=off", "GONOSUMDB=*", "GOFLAGS=-mod=mod", "GOWORK=off",
		"GOTOOLCHAIN=local",
	)
	cmd.Dir = t.TempDir() // outside this module, as a user runs it
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/devhook@%s: %v\n%s", path, version, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "devhook"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "devhook "+version) {
		t.Fatalf("devhook version after go install: %v %q, want it to start with devhook %s", err, out, version)
	}
}

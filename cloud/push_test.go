package cloud_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
)

// copyDir copies the test application src into a temporary directory, so
// that building it leaves testdata alone.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadManifestErrors: every bad manifest is an error naming app.yaml
// and what is wrong.
func TestReadManifestErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"no file", "", "app.yaml does not exist"},
		{"not yaml", "type: [python\n", "is not a valid manifest"},
		{"no type", "runtime: r\nfiles: [main.py]\n", "type is missing"},
		{"bad type", "type: rust\nruntime: r\nfiles: [main]\n", `type "rust" is not one of python, go and java`},
		{"no runtime", "type: python\nfiles: [main.py]\n", "runtime is missing"},
		{"no files", "type: python\nruntime: r\n", "files is missing or empty"},
		{"files escape", "type: python\nruntime: r\nfiles: [main.py, ../secret]\n", `"../secret" leaves the application's directory`},
		{"absolute file", "type: python\nruntime: r\nfiles: [/etc/passwd]\n", "leaves the application's directory"},
		{"pip for go", "type: go\nruntime: r\nfiles: [main]\npython:\n  pip-requirements: r.txt\n", "only for type python"},
		{"files not a list", "type: python\nruntime: r\nfiles: main.py\n", "is not a valid manifest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"main.py": ""}
			if tt.yaml != "" {
				files["app.yaml"] = tt.yaml
			}
			dir := writeFiles(t, files)
			_, err := cloud.ReadManifest(dir)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, "app.yaml")) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to name %s and say %q", err, filepath.Join(dir, "app.yaml"), tt.want)
			}
		})
	}
}

// TestResolveFiles: paths, globs, ** and directories choose files; ! takes
// them out; an entry matching nothing and a missing executable are errors.
func TestResolveFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"main.py": "", "app.yaml": "", "src/a.py": "", "src/b.txt": "", "src/deep/c.py": "", "src/deep/c_test.py": "",
		"data/x.json": "", ".hidden/h.py": "", "src/.d.py": "",
	})
	tests := []struct {
		files []string
		want  string // comma-separated, or "error: <text>"
	}{
		{[]string{"main.py"}, "main.py"},
		{[]string{"main.py", "src/*.py"}, "main.py,src/a.py"},
		{[]string{"main.py", "src/**/*.py"}, "main.py,src/a.py,src/deep/c.py,src/deep/c_test.py"},
		{[]string{"main.py", "src/**/*.py", "!**/*_test.py"}, "main.py,src/a.py,src/deep/c.py"},
		{[]string{"main.py", "data/"}, "data/x.json,main.py"},
		{[]string{"main.py", "data"}, "data/x.json,main.py"},
		{[]string{"./main.py", ".hidden/*.py"}, ".hidden/h.py,main.py"},
		{[]string{"*.py"}, "main.py"},
		{[]string{"main.py", "nope/*.py"}, "error: lists files that are not in"},
		{[]string{"src/a.py"}, "error: a python application needs main.py"},
	}
	for _, tt := range tests {
		m := &cloud.Manifest{Type: "python", Files: tt.files, Dir: dir, Path: filepath.Join(dir, "app.yaml")}
		got, err := m.ResolveFiles()
		if msg, ok := strings.CutPrefix(tt.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "app.yaml") {
				t.Errorf("files %v: error %v, want one naming app.yaml saying %q", tt.files, err, msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("files %v: %v", tt.files, err)
			continue
		}
		if strings.Join(got, ",") != tt.want {
			t.Errorf("files %v chose %v, want %s", tt.files, got, tt.want)
		}
	}
}

// tarNames lists a gzip'd tar's entries.
func tarNames(t *testing.T, p string) []string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

// TestPushPythonWithDependencies: the python test application's package
// holds app.yaml, its files and its dependency installed by pip from a
// local directory package; pushed to the emulator, its run executes it
// with that dependency and its log is readable.
func TestPushPythonWithDependencies(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	t.Setenv("PIP_NO_INDEX", "1") // the index is not reachable here, and not needed
	dir := copyDir(t, filepath.Join("testdata", "apps", "python"))
	m, err := cloud.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out strings.Builder
	pkg, err := cloud.BuildPackage(ctx, m, cloud.PackageOptions{Output: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer pkg.Remove()
	names := tarNames(t, pkg.Path)
	for _, want := range []string{"app.yaml", "main.py", "lib/helper.py", cloud.DepsDir + "/devhook_dep/__init__.py"} {
		if !slices.Contains(names, want) {
			t.Errorf("package lacks %s: %v", want, names)
		}
	}
	for _, not := range []string{"lib/helper_test.py", "requirements.txt", "dep/backend.py"} {
		if slices.Contains(names, not) {
			t.Errorf("package has %s: %v", not, names)
		}
	}
	if pkg.Deps == 0 || !slices.Equal(names, pkg.Files) {
		t.Errorf("Deps %d, Files %v, tar %v", pkg.Deps, pkg.Files, names)
	}

	c, srv := newService(t)
	if _, err := c.Push(ctx, "py", m, pkg); !cloud.IsNotFound(err) {
		t.Fatalf("push to a missing application: %v, want 404", err)
	}
	if _, err := c.CreateApplication(ctx, cloud.ApplicationInput{ID: "py", Name: "py"}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Push(ctx, "py", m, pkg)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if res.AppID != "py" || res.Endpoint != host || res.InstanceURL != srv.URL+"/v1/applications/py/runs?instance_id=latest" {
		t.Errorf("push object %+v", res)
	}
	r, err := c.StartRun(ctx, "py", "", cloud.RunInput{Input: json.RawMessage(`{"k":"v"}`), Options: map[string]string{"limit": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitRun(ctx, "py", r.ID, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := c.RunLogs(ctx, "py", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !done.Succeeded() {
		t.Fatalf("run %s: %s; logs %q", done.Status(), done.ErrorText(), logs)
	}
	var o struct {
		Solution struct {
			Dep  string   `json:"dep"`
			Args []string `json:"args"`
		} `json:"solution"`
	}
	json.Unmarshal(done.Output, &o)
	if o.Solution.Dep != "from-dep" || strings.Join(o.Solution.Args, " ") != "-limit 3" {
		t.Errorf("output %s", done.Output)
	}
	if done.Metadata.Runtime != "python:3.11" || done.Metadata.OutputSize.String() != strconv.Itoa(len(done.Output)) {
		t.Errorf("runtime %q output_size %s for %d bytes", done.Metadata.Runtime, done.Metadata.OutputSize, len(done.Output))
	}
	if !strings.Contains(logs, "pushed app: running with ['-limit', '3']") {
		t.Errorf("logs %q", logs)
	}

	// A failing run: its error is the end of standard error.
	r, err = c.StartRun(ctx, "py", "latest", cloud.RunInput{Input: json.RawMessage(`{"fail":"no solution exists"}`)})
	if err != nil {
		t.Fatal(err)
	}
	done, err = c.WaitRun(ctx, "py", r.ID, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status() != "failed" || done.ErrorText() != "about to fail\nno solution exists" {
		t.Errorf("failed run: %s %q", done.Status(), done.ErrorText())
	}
	if _, err := c.CancelRun(ctx, "py", r.ID); !cloud.IsConflict(err) {
		t.Errorf("cancel a failed run: %v, want 409", err)
	}
}

// TestBuildPackageStopsEarly: a failing build command, a failing pre-push
// command, a missing requirements file and a file the build did not make
// are errors naming app.yaml, with the command's own words.
func TestBuildPackageStopsEarly(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"build fails", "type: go\nruntime: r\nbuild:\n  command: sh -c false-build-command-xyz\nfiles: [main]\n", "the build command (sh -c false-build-command-xyz) failed"},
		{"pre-push fails", "type: python\nruntime: r\npre-push: echo broken >&2; exit 4\nfiles: [main.py]\n", "broken"},
		{"no requirements file", "type: python\nruntime: r\nfiles: [main.py]\npython:\n  pip-requirements: missing.txt\n", "python.pip-requirements missing.txt is not a file"},
		{"not built", "type: go\nruntime: r\nbuild:\n  command: true\nfiles: [main]\n", "lists files that are not in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"app.yaml": tt.yaml, "main.py": "print('{}')\n"})
			m, err := cloud.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = cloud.BuildPackage(context.Background(), m, cloud.PackageOptions{})
			if err == nil || !strings.Contains(err.Error(), "app.yaml") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming app.yaml saying %q", err, tt.want)
			}
		})
	}
}

package cloud

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// DepsDir is where a python application's dependencies go in its
// package: a hidden directory the service puts on PYTHONPATH.
const DepsDir = ".devhook/python/deps"

// PackageOptions says how to build a package.
type PackageOptions struct {
	// Python runs pip for python.pip-requirements; empty means python3.
	Python string
	// Output receives what the build, pre-push and pip commands print;
	// nil discards it. Their standard error also goes into the error when
	// one fails.
	Output io.Writer
}

// Package is a built package: a gzip'd tar in a temporary file.
type Package struct {
	Path  string   // the .tar.gz; Remove deletes it
	Size  int64    // its bytes
	Files []string // what it holds, app.yaml and the dependencies included
	Deps  int      // how many of Files are bundled python dependencies
}

// Remove deletes the package's file.
func (p *Package) Remove() error { return os.RemoveAll(filepath.Dir(p.Path)) }

// BuildPackage runs the manifest's build command and pre-push command in
// its directory, bundles python.pip-requirements (python3 -m pip install
// --target) and writes app.yaml, the listed files and the dependencies
// into a gzip'd tar. Missing files are errors naming them; nothing is
// sent anywhere.
func BuildPackage(ctx context.Context, m *Manifest, o PackageOptions) (*Package, error) {
	if o.Output == nil {
		o.Output = io.Discard
	}
	if o.Python == "" {
		o.Python = "python3"
	}
	if req := m.PipRequirements(); req != "" {
		if fi, err := os.Stat(filepath.Join(m.Dir, req)); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: python.pip-requirements %s is not a file in %s", m.Path, req, m.Dir)
		}
	}
	if err := runCommands(ctx, m, o.Output); err != nil {
		return nil, err
	}
	files, err := m.ResolveFiles()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "devhook-push-")
	if err != nil {
		return nil, fmt.Errorf("make a directory for the package: %w", err)
	}
	pkg := &Package{Path: filepath.Join(tmp, "app.tar.gz")}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	deps, err := installDeps(ctx, m, o, filepath.Join(tmp, "deps"))
	if err != nil {
		return nil, err
	}
	if err := writePackage(pkg, m, files, deps); err != nil {
		return nil, err
	}
	ok = true
	return pkg, nil
}

// runCommands runs the manifest's build command, then its pre-push
// command (in a shell), each in the manifest's directory.
func runCommands(ctx context.Context, m *Manifest, out io.Writer) error {
	if m.Build != nil && strings.TrimSpace(m.Build.Command) != "" {
		args := strings.Fields(m.Build.Command)
		if err := runStep(ctx, m, "build command", out, m.Build.Environment, args...); err != nil {
			return err
		}
	}
	if strings.TrimSpace(m.PrePush) != "" {
		shell := []string{"sh", "-c", m.PrePush}
		if runtime.GOOS == "windows" {
			shell = []string{"cmd", "/c", m.PrePush}
		}
		if err := runStep(ctx, m, "pre-push command", out, nil, shell...); err != nil {
			return err
		}
	}
	return nil
}

// installDeps installs python.pip-requirements into dir with pip and
// returns dir; "" when the manifest has no requirements.
func installDeps(ctx context.Context, m *Manifest, o PackageOptions, dir string) (string, error) {
	req := m.PipRequirements()
	if req == "" {
		return "", nil
	}
	// --target: nothing is installed into the python that runs pip,
	// so its warning about running as root does not apply.
	err := runStep(ctx, m, "pip install of "+req, o.Output, map[string]string{"PIP_ROOT_USER_ACTION": "ignore"},
		o.Python, "-m", "pip", "install", "-r", req, "--target", dir,
		"--upgrade", "--no-input", "--quiet", "--no-warn-conflicts", "--disable-pip-version-check")
	if err != nil {
		return "", err
	}
	return dir, nil
}

// writePackage writes pkg.Path, a gzip'd tar of app.yaml, files (in the
// manifest's directory) and every file under deps (when not "") under
// DepsDir, and sets pkg's Files, Deps and Size.
func writePackage(pkg *Package, m *Manifest, files []string, deps string) error {
	f, err := os.Create(pkg.Path)
	if err != nil {
		return fmt.Errorf("write the package: %w", err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	pk := &packer{tw: tar.NewWriter(zw), pkg: pkg}
	if err := pk.add(ManifestFile, m.Path); err != nil {
		return err
	}
	for _, name := range files {
		if name == ManifestFile {
			continue
		}
		if err := pk.add(name, filepath.Join(m.Dir, filepath.FromSlash(name))); err != nil {
			return err
		}
	}
	if deps != "" {
		depFiles, err := regularFiles(deps)
		if err != nil {
			return fmt.Errorf("package the python dependencies: %w", err)
		}
		for _, rel := range depFiles {
			if err := pk.add(DepsDir+"/"+rel, filepath.Join(deps, filepath.FromSlash(rel))); err != nil {
				return err
			}
			pkg.Deps++
		}
	}
	if err := pk.tw.Close(); err != nil {
		return fmt.Errorf("write the package: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write the package: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the package: %w", err)
	}
	fi, err := os.Stat(pkg.Path)
	if err != nil {
		return fmt.Errorf("write the package: %w", err)
	}
	pkg.Size = fi.Size()
	return nil
}

// packer adds files to a package's tar.
type packer struct {
	tw  *tar.Writer
	pkg *Package
}

// add writes the file src into the tar as name, and names it in the
// package's Files.
func (p *packer) add(name, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("package %s: %w", name, err)
	}
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := p.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("package %s: %w", name, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("package %s: %w", name, err)
	}
	defer in.Close()
	n, err := io.Copy(p.tw, in)
	if err != nil {
		return fmt.Errorf("package %s: it changed while being packaged (%d of %d bytes): %w", name, n, fi.Size(), err)
	}
	if n != fi.Size() {
		return fmt.Errorf("package %s: it changed while being packaged (%d of %d bytes)", name, n, fi.Size())
	}
	p.pkg.Files = append(p.pkg.Files, name)
	return nil
}

// regularFiles lists the regular files under dir, slash-separated and
// relative to it, sorted.
func regularFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

// runStep runs one of the manifest's commands in its directory.
func runStep(ctx context.Context, m *Manifest, what string, out io.Writer, env map[string]string, args ...string) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = m.Dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stdout = out
	cmd.Stderr = io.MultiWriter(out, &tailWriter{buf: &stderr, max: 4 << 10})
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			msg = ":\n" + msg
		}
		return fmt.Errorf("%s: the %s (%s) failed: %w%s", m.Path, what, strings.Join(args, " "), err, msg)
	}
	return nil
}

// tailWriter keeps the last max bytes written.
type tailWriter struct {
	buf *bytes.Buffer
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

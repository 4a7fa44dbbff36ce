// Package scripts holds the tests of the release script (scripts/release):
// what a user downloads is checked as a user would check it.
package scripts

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

const testVersion = "v0.0.0-releasetest"

var (
	releaseOnce sync.Once
	releaseDir  string
	releaseErr  error
	releaseOut  []byte
)

// release runs scripts/release for linux/amd64, linux/arm64 and
// windows/amd64 into a directory shared by the tests of this package (a
// build takes a while): two container images, a formula and a manifest.
func release(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds release archives: not with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("scripts/release runs on Linux")
	}
	releaseOnce.Do(func() {
		releaseDir, releaseErr = os.MkdirTemp("", "devhook-release-")
		if releaseErr == nil {
			releaseOut, releaseErr = runRelease(releaseDir, "linux/amd64", "linux/arm64", "windows/amd64")
		}
	})
	if releaseErr != nil {
		t.Fatalf("scripts/release: %v\n%s", releaseErr, releaseOut)
	}
	return releaseDir
}

// testReleaseURL is where the tests say the release is published.
const testReleaseURL = "https://downloads.example.com/devhook/" + testVersion

func runRelease(out string, targets ...string) ([]byte, error) {
	cmd := exec.Command("./release", append([]string{testVersion, out}, targets...)...)
	cmd.Env = append(os.Environ(), "DEVHOOK_RELEASE_URL="+testReleaseURL)
	return cmd.CombinedOutput()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if releaseDir != "" {
		os.RemoveAll(releaseDir)
	}
	os.Exit(code)
}

// The same version built twice, with the targets in another order, gives
// the same bytes: archives, package, images, formula, manifest and
// checksums.
func TestReleaseIsReproducible(t *testing.T) {
	first := release(t)
	second := t.TempDir()
	if out, err := runRelease(second, "windows/amd64", "linux/arm64", "linux/amd64"); err != nil {
		t.Fatalf("scripts/release again: %v\n%s", err, out)
	}
	names := files(t, first)
	if got := files(t, second); !slices.Equal(got, names) {
		t.Fatalf("files %v, then %v", names, got)
	}
	for _, name := range names {
		a, _ := os.ReadFile(filepath.Join(first, name))
		b, _ := os.ReadFile(filepath.Join(second, name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of %s", name, testVersion)
		}
	}
}

func TestReleaseFiles(t *testing.T) {
	dir := release(t)
	want := []string{
		"SHA256SUMS",
		"devhook.json",
		"devhook.rb",
		"devhook_0.0.0~releasetest_amd64.deb",
		"devhook_" + testVersion + "_linux_amd64.tar.gz",
		"devhook_" + testVersion + "_linux_amd64_oci.tar",
		"devhook_" + testVersion + "_linux_arm64.tar.gz",
		"devhook_" + testVersion + "_linux_arm64_oci.tar",
		"devhook_" + testVersion + "_windows_amd64.zip",
	}
	if got := files(t, dir); !slices.Equal(got, want) {
		t.Fatalf("release files %v, want %v", got, want)
	}

	// SHA256SUMS names every other file, and sha256sum -c agrees.
	sums, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	for _, name := range want[1:] {
		if !strings.Contains(string(sums), "  "+name+"\n") {
			t.Errorf("SHA256SUMS does not name %s:\n%s", name, sums)
		}
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}

	// The Linux archive: one directory with the binary, LICENSE and README.
	prefix := "devhook_" + testVersion + "_linux_amd64/"
	entries := untar(t, filepath.Join(dir, "devhook_"+testVersion+"_linux_amd64.tar.gz"))
	var names []string
	for name := range entries {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{prefix, prefix + "LICENSE", prefix + "README.md", prefix + "devhook"}) {
		t.Fatalf("archive holds %v", names)
	}
	license, _ := os.ReadFile("../LICENSE")
	if !bytes.Equal(entries[prefix+"LICENSE"], license) || !strings.Contains(string(license), "Apache License") {
		t.Error("the archive's LICENSE is not the project's Apache License 2.0")
	}

	// Its binary runs and says the version it was stamped with.
	if runtime.GOARCH == "amd64" {
		bin := filepath.Join(t.TempDir(), "devhook")
		if err := os.WriteFile(bin, entries[prefix+"devhook"], 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "devhook "+testVersion) {
			t.Errorf("devhook version from the archive: %v %q", err, out)
		}
	}

	// The Windows archive: a zip with devhook.exe, LICENSE and README.
	zr, err := zip.OpenReader(filepath.Join(dir, "devhook_"+testVersion+"_windows_amd64.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var znames []string
	for _, f := range zr.File {
		znames = append(znames, f.Name)
	}
	slices.Sort(znames)
	zp := "devhook_" + testVersion + "_windows_amd64/"
	if !slices.Equal(znames, []string{zp + "LICENSE", zp + "README.md", zp + "devhook.exe"}) {
		t.Errorf("zip holds %v", znames)
	}
}

// A bad call says how to call it and builds nothing: a version that cannot
// be an image's tag, a release URL a formula cannot name.
func TestReleaseRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		url  string
	}{
		{args: []string{}},
		{args: []string{"v1.0.0"}},
		{args: []string{"v1.0.0", t.TempDir(), "plan9/amd64"}},
		{args: []string{"a/b", t.TempDir()}},
		{args: []string{"v1.0.0+build.5", t.TempDir()}},
		{args: []string{"-v1", t.TempDir()}},
		{args: []string{"v1.0.0", t.TempDir()}, url: "ftp://example.com/devhook"},
		{args: []string{"v1.0.0", t.TempDir()}, url: "example.com/devhook"},
	} {
		cmd := exec.Command("./release", c.args...)
		cmd.Env = append(os.Environ(), "DEVHOOK_RELEASE_URL="+c.url)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.HasPrefix(string(out), "usage: scripts/release") && !strings.HasPrefix(string(out), "release: ") {
			t.Errorf("release %q with DEVHOOK_RELEASE_URL=%q: %v %s", c.args, c.url, err, out)
		}
		if len(c.args) >= 2 {
			if names, _ := os.ReadDir(c.args[1]); len(names) > 0 {
				t.Errorf("release %q wrote %d files", c.args, len(names))
			}
		}
	}
}

// dpkgTestEnv asks for TestDebianPackageInstallsAndRemoves outside CI.
const dpkgTestEnv = "DEVHOOK_TEST_DPKG"

// The Debian package installs and uninstalls on this machine: dpkg -i puts
// the command, the unit and its settings in place (the unit passes
// systemd-analyze verify), dpkg -r takes the command away and keeps the
// settings, and dpkg --purge removes those too. It needs root and dpkg, and
// a machine where no devhook package is installed already. It changes the
// machine, so it runs only in CI (CI set, as .ci/run does) or when asked
// with DEVHOOK_TEST_DPKG=1: go test ./... alone changes nothing.
func TestDebianPackageInstallsAndRemoves(t *testing.T) {
	ci := os.Getenv("CI") != ""
	if !ci && os.Getenv(dpkgTestEnv) != "1" {
		t.Skip("installs and purges the devhook Debian package on this machine: runs in CI (CI=1), or with " + dpkgTestEnv + "=1")
	}
	dir := release(t)
	skip := func(why string) {
		if ci {
			t.Fatalf("CI: %s", why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("dpkg -i needs root")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		skip("no dpkg on this machine")
	}
	if exec.Command("dpkg", "-s", "devhook").Run() == nil {
		t.Skip("a devhook package is installed on this machine already: left alone")
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	deb := filepath.Join(dir, "devhook_0.0.0~releasetest_amd64.deb")
	run("dpkg", "-i", deb)
	t.Cleanup(func() { exec.Command("dpkg", "--purge", "devhook").Run() })

	if out := run("/usr/bin/devhook", "version"); !strings.HasPrefix(out, "devhook "+testVersion) {
		t.Errorf("installed devhook version: %q", out)
	}
	unit := "/lib/systemd/system/devhook-relay.service"
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, setting := range []string{"ExecStart=/usr/bin/devhook relay serve", "DynamicUser=yes", "StateDirectory=devhook-relay",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "EnvironmentFile=/etc/default/devhook-relay",
		"SuccessExitStatus=143"} {
		if !strings.Contains(string(b), setting+"\n") && !strings.Contains(string(b), setting+" ") {
			t.Errorf("the unit lacks %s", setting)
		}
	}
	if _, err := os.Stat("/etc/default/devhook-relay"); err != nil {
		t.Errorf("no settings file: %v", err)
	}
	if _, err := os.Stat("/usr/share/man/man1/devhook-relay-serve.1.gz"); err != nil {
		t.Errorf("no man page: %v", err)
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		run("systemd-analyze", "verify", unit)
	}

	run("dpkg", "-r", "devhook")
	if _, err := os.Stat("/usr/bin/devhook"); !os.IsNotExist(err) {
		t.Errorf("/usr/bin/devhook after dpkg -r: %v", err)
	}
	if _, err := os.Stat("/etc/default/devhook-relay"); err != nil {
		t.Errorf("dpkg -r removed the settings, which only purge should: %v", err)
	}
	run("dpkg", "--purge", "devhook")
	if _, err := os.Stat("/etc/default/devhook-relay"); !os.IsNotExist(err) {
		t.Errorf("settings after dpkg --purge: %v", err)
	}
}

// go test ./... changes nothing on the machine: without CI or
// DEVHOOK_TEST_DPKG, the Debian package test skips before it builds or
// installs anything, and says how to run it.
func TestDebianPackageTestRunsOnlyWhenAsked(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test: not with -short")
	}
	if os.Getenv("DEVHOOK_TEST_DPKG_GATE") != "" {
		t.Skip("inside the gate's own run")
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^TestDebianPackageInstallsAndRemoves$", ".")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "CI" && k != dpkgTestEnv {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DEVHOOK_TEST_DPKG_GATE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- SKIP: TestDebianPackageInstallsAndRemoves") ||
		!strings.Contains(string(out), "runs in CI (CI=1), or with DEVHOOK_TEST_DPKG=1") {
		t.Fatalf("the Debian package test without CI or %s: %v\n%s", dpkgTestEnv, err, out)
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, not root", h.Name, h.Uid, h.Gid)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
	}
}

package emulator_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

// tmpfs mounts a tmpfs of size bytes for the test, unmounted at its end
// (after whatever the test closes later in its cleanups). It skips when
// the test is not root, and fails so under CI.
func tmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+itoa(size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := "a really full disk is a tmpfs, which only root may mount: " + err.Error() + ": " + string(bytes.TrimSpace(out))
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// bomb is a gzip'd tar whose main.py unpacks to size bytes of zeros: a
// small upload that unpacks to much.
func bomb(t *testing.T, size int64) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "main.py", Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: t0}); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(zero)) {
		tw.Write(zero[:min(left, int64(len(zero)))])
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// padded is the python test application with a file of n bytes besides,
// tagged so that each tag makes a package of its own.
func padded(t *testing.T, tag string, n int) []byte {
	return makePackage(t, pkgFile{name: "app.yaml", body: readApp(t, "python", "app.yaml")},
		pkgFile{name: "main.py", body: readApp(t, "python", "main.py")},
		pkgFile{name: "pad", body: append([]byte(tag), make([]byte, n)...)})
}

// upload PUTs pkg to a new upload URL of app, without activating it.
func (v *env) upload(app string, pkg []byte) (int, []byte) {
	v.t.Helper()
	var u struct {
		UploadURL string `json:"upload_url"`
	}
	v.do("GET", "/v1/applications/"+app+"/binary", nil, 200, &u)
	return v.putPackage(u.UploadURL, pkg)
}

func (v *env) activate(app string) (int, []byte) {
	v.t.Helper()
	status, _, body := v.request(testKey, "PUT", "/v1/applications/"+app+"/binary", `{"requirements":{"executable_type":"python","runtime":"python:3"}}`)
	return status, body
}

// pushedBytes is what the files and directories under the data
// directory's pushed/ count, as the bound counts them.
func pushedBytes(t *testing.T, dataDir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(filepath.Join(dataDir, "pushed"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			n += 4096
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += (max(fi.Size(), 1) + 4095) / 4096 * 4096
		}
		return nil
	})
	return n
}

// TestPushedBound_BombStopsAtTheBound: on a disk with room for little more
// than the bound, a package that unpacks to far more is refused with 413
// when it reaches the bound, not when the disk is full, and leaves nothing
// behind; a good package is taken after it.
func TestPushedBound_BombStopsAtTheBound(t *testing.T) {
	data := tmpfs(t, 6<<20)
	cfg := testConfig()
	cfg.DataDir = data
	cfg.MaxPushedBytes = 2 << 20
	v := newEnv(t, cfg)
	v.newApp("app")
	status, body := v.upload("app", bomb(t, 64<<20))
	wantError(t, "a package that unpacks past the bound", status, body, 413)
	for _, w := range []string{"no room", "--max-pushed"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("refusal %s does not say %q", body, w)
		}
	}
	for _, d := range []string{"incoming", "packages", "work"} {
		if entries, _ := os.ReadDir(filepath.Join(data, "pushed", d)); len(entries) != 0 {
			t.Errorf("pushed/%s keeps %d entries after the refusal", d, len(entries))
		}
	}
	v.push("app", "python", pythonPackage(t))
	r := v.startRun("app", "latest", map[string]any{"input": map[string]int{"n": 1}})
	if done, _ := v.waitFinal("app", r.ID); done.Metadata.StatusV2 != "succeeded" {
		t.Fatalf("run after the refusal: %s %q", done.Metadata.StatusV2, done.Metadata.Error)
	}
}

// TestPushedBound_LeastRecentlyUsedGoesFirst: when room is needed the
// packages no instance or run uses go, the oldest first; an activation of
// one that went says to upload it again; a package that does not fit
// beside the ones in use is refused; the disk never holds more than the
// bound.
func TestPushedBound_LeastRecentlyUsedGoesFirst(t *testing.T) {
	const pad = 100 << 10
	cost := int64(4096 + (pad+4096+4095)/4096*4096 + 2*4096 + 8192) // dir, pad, app.yaml, main.py, slack
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.MaxPushedBytes = 3*cost + cost/2
	v := newEnv(t, cfg)
	for _, a := range []string{"a", "b", "c", "d", "e", "f"} {
		v.newApp(a)
	}
	v.push("a", "python", padded(t, "a", pad)) // active on a: pinned
	for _, a := range []string{"b", "c"} {
		if status, body := v.upload(a, padded(t, a, pad)); status != 200 {
			t.Fatalf("upload for %s: %d %s", a, status, body)
		}
	}
	if status, body := v.upload("d", padded(t, "d", pad)); status != 200 {
		t.Fatalf("upload for d, which b's package makes room for: %d %s", status, body)
	}
	status, body := v.activate("b")
	wantError(t, "activation of the package that made room", status, body, 400)
	if !strings.Contains(string(body), "upload it again") {
		t.Errorf("activation of an evicted package: %s", body)
	}
	if status, body := v.activate("c"); status != 200 {
		t.Fatalf("activation of c's package, which stayed: %d %s", status, body)
	}
	// a and c are in use; d's upload waits. e's takes d's room.
	if status, body := v.upload("e", padded(t, "e", pad)); status != 200 {
		t.Fatalf("upload for e: %d %s", status, body)
	}
	if status, body := v.activate("d"); status != 400 {
		t.Errorf("activation of d's evicted package: %d %s", status, body)
	}
	// Beside a, c and e's upload, one twice as large cannot fit even
	// with e's gone.
	status, body = v.upload("f", padded(t, "f", 2*pad))
	wantError(t, "a package larger than the room beside the ones in use", status, body, 413)
	if n := pushedBytes(t, cfg.DataDir); n > cfg.MaxPushedBytes {
		t.Errorf("pushed/ holds %d bytes, more than the bound %d", n, cfg.MaxPushedBytes)
	}
	for _, a := range []string{"a", "c"} {
		r := v.startRun(a, "latest", map[string]any{"input": map[string]int{"n": 1}})
		if done, _ := v.waitFinal(a, r.ID); done.Metadata.StatusV2 != "succeeded" {
			t.Errorf("run of %s: %s %q", a, done.Metadata.StatusV2, done.Metadata.Error)
		}
	}
}

// TestPushedBound_RebuiltAtStart: after a restart the packages on disk
// count toward the bound, and an upload never activated whose time passed
// while the emulator was down is gone at start.
func TestPushedBound_RebuiltAtStart(t *testing.T) {
	const pad = 100 << 10
	cost := int64(4096 + (pad+4096+4095)/4096*4096 + 2*4096 + 8192)
	clk := newClock(t0)
	cfg := testConfig()
	cfg.Now = clk.Now
	cfg.DataDir = t.TempDir()
	cfg.MaxPushedBytes = 2*cost + cost/2
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e, srv: httptestServer(t, e)}
	for _, a := range []string{"a", "b", "c"} {
		v.newApp(a)
	}
	v.push("a", "python", padded(t, "a", pad))
	if status, body := v.upload("b", padded(t, "b", pad)); status != 200 {
		t.Fatalf("upload for b: %d %s", status, body)
	}
	v.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	packages := func() int {
		entries, _ := os.ReadDir(filepath.Join(cfg.DataDir, "pushed", "packages"))
		return len(entries)
	}
	if n := packages(); n != 2 {
		t.Fatalf("%d packages kept before the restart, want a's and b's", n)
	}

	// Within b's time: both stay, and count. c's upload needs b's room.
	e, err = emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v = &env{t: t, e: e, srv: httptestServer(t, e)}
	if n := packages(); n != 2 {
		t.Fatalf("%d packages kept after a restart within b's time, want 2", n)
	}
	status, body := v.upload("c", padded(t, "c", 2*pad))
	wantError(t, "an upload that does not fit beside the packages on disk", status, body, 413)
	v.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// Past it (its URL expired an hour after it was made, and an hour
	// more): b's package is gone at start, a's stays.
	clk.Advance(2*emulator.DefaultUploadTTL + time.Minute)
	e, err = emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	v = &env{t: t, e: e, srv: httptestServer(t, e)}
	if n := packages(); n != 1 {
		t.Fatalf("%d packages kept after a restart past b's time, want a's alone", n)
	}
	status, body = v.activate("b")
	wantError(t, "activation of an upload that expired", status, body, 400)
	if status, body := v.upload("c", padded(t, "c", pad)); status != 200 {
		t.Fatalf("upload for c once b's went: %d %s", status, body)
	}
}

// TestPushedBound_NeverActivatedExpires: a package uploaded and never
// activated is removed once its upload URL has been expired for
// UploadTTL, while the emulator runs.
func TestPushedBound_NeverActivatedExpires(t *testing.T) {
	clk := newClock(t0)
	cfg := testConfig()
	cfg.Now = clk.Now
	cfg.DataDir = t.TempDir()
	v := newEnv(t, cfg)
	v.newApp("a")
	v.newApp("b")
	if status, body := v.upload("a", padded(t, "a", 10)); status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	clk.Advance(2*emulator.DefaultUploadTTL + time.Second)
	// Another upload: the sweep looks again (its own wait would be an
	// hour of the real clock).
	if status, body := v.upload("b", padded(t, "b", 10)); status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	eventually(t, func() bool {
		entries, _ := os.ReadDir(filepath.Join(cfg.DataDir, "pushed", "packages"))
		return len(entries) == 1
	}, "a's package never activated to go")
	status, body := v.activate("a")
	wantError(t, "activation of an upload that expired", status, body, 400)
	if status, body := v.activate("b"); status != 200 {
		t.Errorf("activation of b's fresh upload: %d %s", status, body)
	}
}

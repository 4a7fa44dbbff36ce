package emulator_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devhook/devhook/emulator"
)

// pkgFile is one entry of a test package.
type pkgFile struct {
	name string
	body []byte
	mode int64
	typ  byte // tar.TypeReg when 0
	link string
}

// makePackage builds a gzip'd tar, as the service's clients do.
func makePackage(t *testing.T, files ...pkgFile) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: f.typ, Linkname: f.link, ModTime: t0}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(f.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return b.Bytes()
}

func readApp(t *testing.T, kind, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "apps", kind, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pythonPackage is the python test application as a package.
func pythonPackage(t *testing.T) []byte {
	return makePackage(t, pkgFile{name: "app.yaml", body: readApp(t, "python", "app.yaml")},
		pkgFile{name: "main.py", body: readApp(t, "python", "main.py")})
}

// goPackage builds the go test application and packages it.
func goPackage(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "main")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/apps/go")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return makePackage(t, pkgFile{name: "app.yaml", body: readApp(t, "go", "app.yaml")}, pkgFile{name: "main", body: bin, mode: 0o755})
}

// javaPackage compiles the java test application into main.jar; it skips
// when java is not installed.
func javaPackage(t *testing.T) []byte {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java is not installed")
	}
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Fatal("java is installed but javac is not: install a JDK to build the test application")
	}
	dir := t.TempDir()
	if b, err := exec.Command(javac, "--release", "8", "-d", dir, filepath.Join("testdata", "apps", "java", "Main.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, b)
	}
	class, err := os.ReadFile(filepath.Join(dir, "Main.class"))
	if err != nil {
		t.Fatal(err)
	}
	var jar bytes.Buffer
	zw := zip.NewWriter(&jar)
	for name, body := range map[string][]byte{"META-INF/MANIFEST.MF": []byte("Manifest-Version: 1.0\r\nMain-Class: Main\r\n\r\n"), "Main.class": class} {
		w, _ := zw.Create(name)
		w.Write(body)
	}
	zw.Close()
	return makePackage(t, pkgFile{name: "app.yaml", body: readApp(t, "java", "app.yaml")}, pkgFile{name: "main.jar", body: jar.Bytes()})
}

// push uploads pkg as the service's clients do and activates it; it
// returns the activation's answer.
func (v *env) push(app, typ string, pkg []byte) map[string]string {
	v.t.Helper()
	var u struct {
		UploadURL string `json:"upload_url"`
	}
	raw := v.do("GET", "/v1/applications/"+app+"/binary", nil, 200, &u)
	sameKeys(v.t, "binary upload answer", raw, "upload_url")
	if status, body := v.putPackage(u.UploadURL, pkg); status != 200 {
		v.t.Fatalf("PUT package: %d %s", status, body)
	}
	var obj map[string]string
	v.do("PUT", "/v1/applications/"+app+"/binary",
		map[string]any{"requirements": map[string]string{"executable_type": typ, "runtime": typ + ":test"}}, 200, &obj)
	return obj
}

// putPackage PUTs a package to an upload URL with no credential.
func (v *env) putPackage(u string, pkg []byte) (int, []byte) {
	v.t.Helper()
	req, err := http.NewRequest("PUT", u, bytes.NewReader(pkg))
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := noRedirect.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// TestPushEndpoints: the three steps answer as docs/INTERFACE.md says, and each
// refusal says why.
func TestPushEndpoints(t *testing.T) {
	cfg := testConfig()
	cfg.MaxPackageBytes = 64 << 10
	v := newEnv(t, cfg)
	v.newApp("app")

	status, _, body := v.request(testKey, "GET", "/v1/applications/nope/binary", nil)
	wantError(t, "upload URL of an unknown app", status, body, 404)
	status, _, body = v.request(testKey, "PUT", "/v1/applications/nope/binary", `{"requirements":{"executable_type":"python","runtime":"x"}}`)
	wantError(t, "activate an unknown app", status, body, 404)
	status, _, body = v.request("", "GET", "/v1/applications/app/binary", nil)
	wantError(t, "upload URL without a credential", status, body, 401)

	status, _, body = v.request(testKey, "PUT", "/v1/applications/app/binary", `{"requirements":{"executable_type":"python","runtime":"x"}}`)
	wantError(t, "activate before any upload", status, body, 400)

	uploadURL := func() string {
		var u struct {
			UploadURL string `json:"upload_url"`
		}
		v.do("GET", "/v1/applications/app/binary", nil, 200, &u)
		if !strings.HasPrefix(u.UploadURL, v.srv.URL+"/") {
			t.Fatalf("upload_url %q is not an absolute URL of the emulator", u.UploadURL)
		}
		return u.UploadURL
	}
	big := make([]byte, 200<<10)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	refusals := []struct {
		name   string
		pkg    []byte
		status int
		reason string
	}{
		{"not gzip", []byte("print('hello')\n"), 400, "not gzip"},
		{"gzip but not tar", gz(t, []byte(strings.Repeat("not a tar ", 100))), 400, "not a valid tar"},
		{"empty", nil, 400, "empty"},
		{"climbs out", makePackage(t, pkgFile{name: "../main.py", body: []byte("x")}), 400, "leaves the package"},
		{"absolute", makePackage(t, pkgFile{name: "/etc/main.py", body: []byte("x")}), 400, "leaves the package"},
		{"symlink", makePackage(t, pkgFile{name: "main.py", body: []byte("x")}, pkgFile{name: "link", typ: tar.TypeSymlink, link: "/etc/passwd"}), 400, "links and devices"},
		{"no executable", makePackage(t, pkgFile{name: "app.yaml", body: []byte("type: python\n")}), 400, "no executable"},
		{"too large", makePackage(t, pkgFile{name: "main.py", body: big}), 413, "larger than"},
	}
	for _, r := range refusals {
		status, body := v.putPackage(uploadURL(), r.pkg)
		wantError(t, r.name, status, body, r.status)
		if !strings.Contains(string(body), r.reason) {
			t.Errorf("%s: answer %s does not say %q", r.name, body, r.reason)
		}
	}
	status, _, body = v.request(testKey, "PUT", "/v1/applications/app/binary", `{"requirements":{"executable_type":"python","runtime":"x"}}`)
	wantError(t, "activate after refused uploads only", status, body, 400)

	// A good package; its URL is then used up.
	u := uploadURL()
	if status, body := v.putPackage(u, pythonPackage(t)); status != 200 || len(body) != 0 {
		t.Fatalf("PUT a good package: %d %s", status, body)
	}
	status, body = v.putPackage(u, pythonPackage(t))
	wantError(t, "second PUT to the same URL", status, body, 404)
	status, body = v.putPackage(v.srv.URL+"/packages/unknown", pythonPackage(t))
	wantError(t, "PUT to an unknown URL", status, body, 404)

	for _, bad := range []string{`{}`, `{"requirements":{"executable_type":"rust","runtime":"x"}}`, `not json`} {
		status, _, body = v.request(testKey, "PUT", "/v1/applications/app/binary", bad)
		wantError(t, "activate with "+bad, status, body, 400)
	}
	status, _, body = v.request(testKey, "PUT", "/v1/applications/app/binary", `{"requirements":{"executable_type":"go","runtime":"x"}}`)
	wantError(t, "activate a python package as go", status, body, 400)
	if !strings.Contains(string(body), "lacks main") {
		t.Errorf("activation of a package without main: %s", body)
	}
	var obj map[string]string
	raw := v.do("PUT", "/v1/applications/app/binary", map[string]any{"requirements": map[string]string{"executable_type": "python", "runtime": "python:3.11"}}, 200, &obj)
	sameKeys(t, "push object", raw, "app_id", "endpoint", "instance_url")
	host := strings.TrimPrefix(v.srv.URL, "http://")
	if obj["app_id"] != "app" || obj["endpoint"] != host || obj["instance_url"] != v.srv.URL+"/v1/applications/app/runs?instance_id=latest" {
		t.Errorf("push object %v", obj)
	}
	// Another account sees no such application.
	status, _, body = v.request("test-key-2", "GET", "/v1/applications/app/binary", nil)
	wantError(t, "upload URL of another account's app", status, body, 404)
}

func gz(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// TestPushKeptWithData: with a data directory the pushed package and its
// activation survive a restart, and a package PUT as some clients send it
// (application/octet-stream, with their API key) is taken alike. A text
// input reaches the application as its text.
func TestPushKeptWithData(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.DataDir = dir
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e, srv: httptestServer(t, e)}
	v.newApp("app")
	var u struct {
		UploadURL string `json:"upload_url"`
	}
	v.do("GET", "/v1/applications/app/binary", nil, 200, &u)
	req, _ := http.NewRequest("PUT", u.UploadURL, bytes.NewReader(pythonPackage(t)))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT as octet-stream: %d", resp.StatusCode)
	}
	v.do("PUT", "/v1/applications/app/binary", map[string]any{"requirements": map[string]string{"executable_type": "python", "runtime": "py"}}, 200, nil)
	v.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e, err = emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v = &env{t: t, e: e, srv: httptestServer(t, e)}
	t.Cleanup(func() { e.Close() })
	r := v.startRun("app", "latest", map[string]any{"input": map[string]int{"n": 7}})
	done, raw := v.waitFinal("app", r.ID)
	if done.Metadata.StatusV2 != "succeeded" || done.Metadata.Runtime != "py" {
		t.Fatalf("run after a restart: %s %q", done.Metadata.StatusV2, done.Metadata.Error)
	}
	if b, _ := json.Marshal(solutionOf(t, raw).Input); string(b) != `{"n":7}` {
		t.Errorf("input %s", b)
	}

	// A text input, uploaded.
	var up struct {
		UploadID  string `json:"upload_id"`
		UploadURL string `json:"upload_url"`
	}
	v.do("POST", "/v1/applications/app/runs/uploadurl", nil, 200, &up)
	if status, body := v.put(up.UploadURL, "plain words"); status != 200 {
		t.Fatalf("PUT input: %d %s", status, body)
	}
	r = v.startRun("app", "latest", map[string]any{"upload_id": up.UploadID})
	done, raw = v.waitFinal("app", r.ID)
	if b, _ := json.Marshal(solutionOf(t, raw).Input); done.Metadata.StatusV2 != "succeeded" || string(b) != `{"text":"plain words"}` {
		t.Errorf("text input run %s read %s", done.Metadata.StatusV2, b)
	}
}

// TestPushedPackageGone: when the unpacked package has gone from the data
// directory, a run fails saying to push again.
func TestPushedPackageGone(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e, srv: httptestServer(t, e)}
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	v.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	pkgs, _ := filepath.Glob(filepath.Join(cfg.DataDir, "pushed", "packages", "*"))
	if len(pkgs) != 1 {
		t.Fatalf("packages in the data directory: %v", pkgs)
	}
	if err := os.RemoveAll(pkgs[0]); err != nil {
		t.Fatal(err)
	}
	e, err = emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	v = &env{t: t, e: e, srv: httptestServer(t, e)}
	r := v.startRun("app", "latest", map[string]any{"input": 1})
	done, _ := v.waitFinal("app", r.ID)
	if m := done.Metadata; m.StatusV2 != "failed" || !strings.Contains(m.Error, "push the application again") {
		t.Errorf("run %s %q", m.StatusV2, m.Error)
	}
}

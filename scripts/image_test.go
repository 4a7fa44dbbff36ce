package scripts

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The image's name, as index.json and manifest.json give it.
const imageName = "localhost/devhook:" + testVersion

// What the tests read of the OCI image specification's documents.
type (
	ociDescriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    *ociPlatform      `json:"platform"`
		Annotations map[string]string `json:"annotations"`
	}
	ociPlatform struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Variant      string `json:"variant"`
	}
	ociIndex struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     string          `json:"mediaType"`
		Manifests     []ociDescriptor `json:"manifests"`
	}
	ociManifest struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Config        ociDescriptor     `json:"config"`
		Layers        []ociDescriptor   `json:"layers"`
		Annotations   map[string]string `json:"annotations"`
	}
	ociConfig struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Variant      string `json:"variant"`
		Config       struct {
			User         string
			ExposedPorts map[string]struct{}
			Env          []string
			Entrypoint   []string
			Cmd          []string
			Volumes      map[string]struct{}
			Labels       map[string]string
		} `json:"config"`
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
)

// image is what TestImage read of one image archive.
type image struct {
	path   string
	config ociConfig
	uid    int
	layer  []layerEntry // in the layer's order
}

type layerEntry struct {
	hdr  *tar.Header
	body []byte
}

func (img *image) file(t *testing.T, name string) layerEntry {
	t.Helper()
	for _, e := range img.layer {
		if e.hdr.Name == name {
			return e
		}
	}
	t.Fatalf("the image has no %s", name)
	return layerEntry{}
}

// env is the value of the image's environment variable name.
func (img *image) env(name string) string {
	for _, kv := range img.config.Config.Env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// The relay's container image for each architecture, read as an engine
// reads it: the layout, index.json, the manifest, the config, the layer
// and docker's manifest.json agree with one another and with the blobs'
// digests and sizes; the config runs devhook relay serve as a user that is
// not root with its volume and port; the layer holds what the relay needs
// (users, /tmp, the volume it may write, CA certificates, the LICENSE).
func TestImage(t *testing.T) {
	dir := release(t)
	for _, p := range []ociPlatform{{"amd64", "linux", ""}, {"arm64", "linux", "v8"}} {
		t.Run(p.Architecture, func(t *testing.T) {
			img := readImage(t, filepath.Join(dir, "devhook_"+testVersion+"_linux_"+p.Architecture+"_oci.tar"), p)
			checkImageConfig(t, img)
			checkImageFiles(t, img, p.Architecture)
		})
	}
}

// readImage reads the archive at path and checks how its parts point to
// one another.
func readImage(t *testing.T, path string, want ociPlatform) *image {
	t.Helper()
	files := readTar(t, path, 0)
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == "blobs/" || name == "blobs/sha256/" || name == "index.json" || name == "manifest.json" || name == "oci-layout" {
			continue
		}
		hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/")
		if sum := sha256.Sum256(files[name].body); !ok || hexDigest != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: not a blob named by its SHA-256", name)
		}
	}
	var layout struct{ ImageLayoutVersion string }
	decode(t, files, "oci-layout", &layout)
	if layout.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout: %+v", layout)
	}

	var idx ociIndex
	decode(t, files, "index.json", &idx)
	if idx.SchemaVersion != 2 || idx.MediaType != "application/vnd.oci.image.index.v1+json" || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %+v", idx)
	}
	top := idx.Manifests[0]
	if top.MediaType != "application/vnd.oci.image.manifest.v1+json" || top.Platform == nil || *top.Platform != want {
		t.Errorf("index.json names %+v, platform %+v, want a manifest for %+v", top, top.Platform, want)
	}
	if top.Annotations["org.opencontainers.image.ref.name"] != testVersion || top.Annotations["io.containerd.image.name"] != imageName {
		t.Errorf("index.json's names: %v", top.Annotations)
	}
	var m ociManifest
	decodeBlob(t, files, top, &m)
	if m.SchemaVersion != 2 || m.MediaType != top.MediaType || m.Config.MediaType != "application/vnd.oci.image.config.v1+json" || len(m.Layers) != 1 {
		t.Fatalf("manifest: %+v", m)
	}
	img := &image{path: path}
	decodeBlob(t, files, m.Config, &img.config)
	c := img.config
	if c.Architecture != want.Architecture || c.OS != want.OS || c.Variant != want.Variant {
		t.Errorf("config for %s/%s/%s, index.json says %+v", c.OS, c.Architecture, c.Variant, want)
	}
	if len(c.RootFS.DiffIDs) != len(m.Layers) || c.RootFS.Type != "layers" {
		t.Fatalf("config's rootfs %+v for %d layers", c.RootFS, len(m.Layers))
	}
	for k, v := range m.Annotations {
		if c.Config.Labels[k] != v {
			t.Errorf("annotation %s=%q, label %q", k, v, c.Config.Labels[k])
		}
	}

	// The layer: its blob as the manifest says, and the digest of its
	// uncompressed tar as the config's diff_ids says.
	ld := m.Layers[0]
	if ld.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("layer's media type %q", ld.MediaType)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, ld)))
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	layerTar, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	if sum := sha256.Sum256(layerTar); c.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("diff_id %s is not the uncompressed layer's digest %x", c.RootFS.DiffIDs[0], sum)
	}
	img.layer = readLayer(t, layerTar)

	// manifest.json, for docker load's classic image store: the same
	// config and layer, by path, and the same name.
	var dockerManifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	decode(t, files, "manifest.json", &dockerManifest)
	wantDocker := fmt.Sprintf("[{blobs/sha256/%s [%s] [blobs/sha256/%s]}]",
		strings.TrimPrefix(m.Config.Digest, "sha256:"), imageName, strings.TrimPrefix(ld.Digest, "sha256:"))
	if got := fmt.Sprint(dockerManifest); got != wantDocker {
		t.Errorf("manifest.json %s, want %s", got, wantDocker)
	}
	return img
}

// checkImageConfig checks how the image runs: devhook relay serve, on its
// port and volume, as a user that is not root.
func checkImageConfig(t *testing.T, img *image) {
	t.Helper()
	c := img.config.Config
	uid, gid, ok := strings.Cut(c.User, ":")
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if !ok || err1 != nil || err2 != nil || u == 0 || g == 0 {
		t.Fatalf("User %q: want numeric uid:gid, not root (Kubernetes' runAsNonRoot needs numbers)", c.User)
	}
	img.uid = u
	if !slices.Equal(c.Entrypoint, []string{"/usr/bin/devhook"}) {
		t.Errorf("Entrypoint %q", c.Entrypoint)
	}
	args := strings.Join(c.Cmd, " ")
	if !strings.HasPrefix(args, "relay serve ") || !strings.Contains(args, " --data /var/lib/devhook") || !strings.Contains(args, " --addr :4041") {
		t.Errorf("Cmd %q: want relay serve on :4041 with --data /var/lib/devhook", c.Cmd)
	}
	if _, ok := c.ExposedPorts["4041/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("ExposedPorts %v", c.ExposedPorts)
	}
	if _, ok := c.Volumes["/var/lib/devhook"]; !ok || len(c.Volumes) != 1 {
		t.Errorf("Volumes %v", c.Volumes)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.source":   "https://github.com/devhook/devhook",
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, c.Labels[k], v)
		}
	}
}

// checkImageFiles checks the layer's files.
func checkImageFiles(t *testing.T, img *image, arch string) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range img.layer {
		h := e.hdr
		if h.Uid != h.Gid || (h.Uid != 0 && h.Uid != img.uid) {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
		if !h.ModTime.Equal(img.layer[0].hdr.ModTime) || h.Uname != "" || h.Gname != "" || len(h.PAXRecords) > 0 {
			t.Errorf("%s: time %v, owner names %q %q, PAX %v: want only the fixed time", h.Name, h.ModTime, h.Uname, h.Gname, h.PAXRecords)
		}
		if parent := filepath.Dir(strings.TrimSuffix(h.Name, "/")); parent != "." && !seen[parent+"/"] {
			t.Errorf("%s comes before its directory", h.Name)
		}
		seen[h.Name] = true
	}

	bin := img.file(t, "usr/bin/devhook")
	if bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 {
		t.Errorf("usr/bin/devhook: mode %o, owner %d", bin.hdr.Mode, bin.hdr.Uid)
	}
	f, err := elf.NewFile(bytes.NewReader(bin.body))
	if err != nil {
		t.Fatalf("usr/bin/devhook: %v", err)
	}
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != want {
		t.Errorf("usr/bin/devhook is for %v, not %v", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("usr/bin/devhook is linked dynamically: the image has no libc")
		}
	}

	// The user: named in /etc/passwd and /etc/group, with a home; the
	// volume and only it (and the home) writable by the user; /tmp for all.
	passwd := string(img.file(t, "etc/passwd").body)
	var home string
	for line := range strings.Lines(passwd) {
		fields := strings.Split(strings.TrimSpace(line), ":")
		if len(fields) == 7 && fields[2] == strconv.Itoa(img.uid) && fields[0] != "root" {
			home = strings.TrimPrefix(fields[5], "/") + "/"
		}
	}
	if home == "/" || img.file(t, home).hdr.Uid != img.uid {
		t.Errorf("/etc/passwd names no user %d with a home it owns:\n%s", img.uid, passwd)
	}
	if !strings.Contains(string(img.file(t, "etc/group").body), ":"+strconv.Itoa(img.uid)+":") {
		t.Errorf("/etc/group names no group %d", img.uid)
	}
	if v := img.file(t, "var/lib/devhook/"); v.hdr.Uid != img.uid || v.hdr.Mode != 0o700 || v.hdr.Typeflag != tar.TypeDir {
		t.Errorf("the volume: owner %d, mode %o", v.hdr.Uid, v.hdr.Mode)
	}
	if tmp := img.file(t, "tmp/"); tmp.hdr.Mode != 0o1777 {
		t.Errorf("/tmp: mode %o", tmp.hdr.Mode)
	}

	license, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(img.file(t, "usr/share/doc/devhook/LICENSE").body, license) {
		t.Error("the image's LICENSE is not the project's")
	}
	if notice := img.file(t, "usr/share/doc/devhook/NOTICE").body; !bytes.Contains(notice, []byte("Mozilla Public License 2.0")) {
		t.Errorf("the NOTICE says nothing of the certificates' licence:\n%s", notice)
	}

	// The roots Go reads (SSL_CERT_FILE) for ACME: Let's Encrypt's among
	// them.
	certFile := img.env("SSL_CERT_FILE")
	if certFile != "/etc/ssl/certs/ca-certificates.crt" {
		t.Errorf("SSL_CERT_FILE=%q: Go reads /etc/ssl/certs/ca-certificates.crt first", certFile)
	}
	rest := img.file(t, strings.TrimPrefix(certFile, "/")).body
	roots := map[string]bool{}
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", certFile, err)
		}
		roots[c.Subject.CommonName] = true
	}
	if len(roots) < 100 || !roots["ISRG Root X1"] || !roots["ISRG Root X2"] {
		t.Errorf("%s: %d roots, ISRG Root X1 %v, X2 %v", certFile, len(roots), roots["ISRG Root X1"], roots["ISRG Root X2"])
	}
}

// The image's binary runs as the image says: devhook version, then its
// command (Entrypoint and Cmd, --addr moved to 127.0.0.1:0) inside the
// layer unpacked as its root, as the image's user and with its
// environment: the relay starts, writes its volume, answers /healthz and
// stops on SIGTERM. That is what an engine would do, less the namespaces.
func TestImageRuns(t *testing.T) {
	dir := release(t)
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skip("runs the linux/amd64 image's binary")
	}
	img := readImage(t, filepath.Join(dir, "devhook_"+testVersion+"_linux_amd64_oci.tar"), ociPlatform{"amd64", "linux", ""})
	checkImageConfig(t, img)
	root := unpack(t, img)

	out, err := exec.Command(filepath.Join(root, "usr/bin/devhook"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "devhook "+testVersion) {
		t.Fatalf("devhook version from the image: %v %q", err, out)
	}

	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: running the image's command in its root needs root")
		}
		t.Skip("running the image's command in its root (chroot, another user) needs root")
	}
	c := img.config.Config
	cmd := exec.Command(c.Entrypoint[0], append(c.Cmd[:len(c.Cmd):len(c.Cmd)], "--addr", "127.0.0.1:0")...)
	cmd.Env = c.Env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uint32(img.uid), Gid: uint32(img.uid)},
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s in the image's root: %v", c.Entrypoint[0], err)
	}
	addrc := make(chan string, 1)
	done := make(chan struct{})
	var waitErr error
	go func() { // owned: ends when the relay ends, which Cleanup makes sure of
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if a, ok := strings.CutPrefix(s.Text(), "devhook relay on "); ok {
				select {
				case addrc <- a:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		waitErr = cmd.Wait()
		close(done)
	}()
	// stopped stops the relay if it runs and returns what it logged (read
	// once it has ended: the buffer is written until then).
	stopped := func() string {
		cmd.Process.Kill() // an error once it has exited: nothing to do
		<-done
		return stderr.String()
	}
	t.Cleanup(func() { stopped() })

	var addr string
	select {
	case addr = <-addrc:
	case <-done:
		t.Fatalf("the relay ended before it said its address: %v\n%s", waitErr, stopped())
	case <-time.After(60 * time.Second): // generous: the relay's start, on a busy machine
		t.Fatalf("the relay said no address in 60 s\n%s", stopped())
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d %s", resp.StatusCode, body)
	}

	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "var/lib/devhook/relay.db"), &st); err != nil || st.Uid != uint32(img.uid) {
		t.Errorf("relay.db in the volume: %v, owner %d", err, st.Uid)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		// A command stopped by SIGTERM exits 143, as shells expect: a clean
		// stop (the Debian unit's SuccessExitStatus says so to systemd).
		if ee, ok := waitErr.(*exec.ExitError); !ok || ee.ExitCode() != 143 {
			t.Errorf("the relay's exit on SIGTERM: %v, want exit status 143\n%s", waitErr, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the relay did not stop within 60 s of SIGTERM\n%s", stopped())
	}
}

// unpack writes the image's layer into a new directory, with its modes
// and, as root, its owners; it returns the directory.
func unpack(t *testing.T, img *image) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range img.layer {
		path := filepath.Join(root, e.hdr.Name)
		var err error
		if e.hdr.Typeflag == tar.TypeDir {
			err = os.MkdirAll(path, 0o700)
		} else {
			err = os.WriteFile(path, e.body, 0o600)
		}
		mode := os.FileMode(e.hdr.Mode & 0o777)
		if e.hdr.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if err == nil {
			err = os.Chmod(path, mode)
		}
		if err == nil && os.Geteuid() == 0 {
			err = os.Lchown(path, e.hdr.Uid, e.hdr.Gid)
		}
		if err != nil {
			t.Fatalf("unpack the layer: %v", err)
		}
	}
	return root
}

// readTar reads a tar archive whole, checking that every entry is a file
// or a directory owned by root or by uid, and that they come in name order.
func readTar(t *testing.T, path string, uid int) map[string]layerEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string]layerEntry{}
	last := ""
	for _, e := range readEntries(t, f) {
		h := e.hdr
		if (h.Uid != 0 && h.Uid != uid) || (h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir) {
			t.Errorf("%s: %s owned by %d:%d, type %c", path, h.Name, h.Uid, h.Gid, h.Typeflag)
		}
		if h.Name <= last {
			t.Errorf("%s: %s after %s", path, h.Name, last)
		}
		last = h.Name
		files[h.Name] = e
	}
	return files
}

func readLayer(t *testing.T, b []byte) []layerEntry {
	t.Helper()
	return readEntries(t, bytes.NewReader(b))
}

func readEntries(t *testing.T, r io.Reader) []layerEntry {
	t.Helper()
	tr := tar.NewReader(r)
	var entries []layerEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return entries
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		if strings.HasPrefix(h.Name, "/") || slices.Contains(strings.Split(h.Name, "/"), "..") {
			t.Fatalf("tar entry %q leaves its root", h.Name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		entries = append(entries, layerEntry{hdr: h, body: b})
	}
}

func decode(t *testing.T, files map[string]layerEntry, name string, v any) {
	t.Helper()
	e, ok := files[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	if err := json.Unmarshal(e.body, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// blob is the blob d names, checked against d's size.
func blob(t *testing.T, files map[string]layerEntry, d ociDescriptor) []byte {
	t.Helper()
	name := "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
	e, ok := files[name]
	if !ok || !strings.HasPrefix(d.Digest, "sha256:") {
		t.Fatalf("no blob %s", d.Digest)
	}
	if int64(len(e.body)) != d.Size {
		t.Fatalf("blob %s: %d bytes, its descriptor says %d", d.Digest, len(e.body), d.Size)
	}
	return e.body
}

func decodeBlob(t *testing.T, files map[string]layerEntry, d ociDescriptor, v any) {
	t.Helper()
	if err := json.Unmarshal(blob(t, files, d), v); err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
}

// needTool returns the path of a third-party tool the test reads the
// release with: skipped when missing, failed in CI (.ci/run installs it).
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: no %s (Debian's %s)", name, pkg)
		}
		t.Skipf("no %s here (Debian's %s)", name, pkg)
	}
	return path
}

// Readers of images that are not devhook's take each archive: skopeo
// reads it as an OCI archive (index.json) and as a docker archive
// (manifest.json, which docker load's classic store reads), and copies it,
// checking every blob's digest; umoci unpacks it into a runtime bundle,
// whose process is the image's command as its user.
func TestImageThirdPartyReaders(t *testing.T) {
	dir := release(t)
	skopeo := needTool(t, "skopeo", "skopeo")
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			path := filepath.Join(dir, "devhook_"+testVersion+"_linux_"+arch+"_oci.tar")
			run := func(name string, args ...string) []byte {
				t.Helper()
				out, err := exec.Command(name, args...).Output()
				if err != nil {
					var stderr []byte
					if e, ok := err.(*exec.ExitError); ok {
						stderr = e.Stderr
					}
					t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
				}
				return out
			}
			for _, transport := range []string{"oci-archive:", "docker-archive:"} {
				var got struct {
					Architecture, Os string
					RepoTags         []string
					Labels           map[string]string
				}
				if err := json.Unmarshal(run(skopeo, "inspect", transport+path), &got); err != nil {
					t.Fatal(err)
				}
				if got.Architecture != arch || got.Os != "linux" || got.Labels["org.opencontainers.image.version"] != testVersion {
					t.Errorf("skopeo inspect %s: %+v", transport, got)
				}
				var config ociConfig
				if err := json.Unmarshal(run(skopeo, "inspect", "--config", transport+path), &config); err != nil {
					t.Fatal(err)
				}
				if config.Config.User != "65532:65532" || !slices.Equal(config.Config.Cmd[:2], []string{"relay", "serve"}) {
					t.Errorf("skopeo inspect --config %s: %+v", transport, config.Config)
				}
			}
			run(skopeo, "copy", "--quiet", "oci-archive:"+path, "dir:"+t.TempDir())

			umoci := needTool(t, "umoci", "umoci")
			layout := t.TempDir()
			run("tar", "-xf", path, "-C", layout)
			bundle := filepath.Join(t.TempDir(), "bundle")
			args := []string{"unpack", "--image", layout + ":" + testVersion, bundle}
			if os.Geteuid() != 0 {
				args = append([]string{"--rootless"}, args...)
			}
			run(umoci, args...)
			var spec struct {
				Process struct {
					User struct{ UID, GID int }
					Args []string
					Env  []string
				}
			}
			b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
			if err == nil {
				err = json.Unmarshal(b, &spec)
			}
			if err != nil {
				t.Fatalf("umoci's bundle: %v", err)
			}
			p := spec.Process
			if p.User.UID != 65532 || p.User.GID != 65532 || strings.Join(p.Args, " ") != "/usr/bin/devhook relay serve --addr :4041 --data /var/lib/devhook" ||
				!slices.Contains(p.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
				t.Errorf("umoci's bundle runs %+v", p)
			}
			if _, err := os.Stat(filepath.Join(bundle, "rootfs/usr/bin/devhook")); err != nil {
				t.Errorf("umoci's bundle: %v", err)
			}
		})
	}
}

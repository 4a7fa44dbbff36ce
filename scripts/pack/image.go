// The relay's container image, for one Linux architecture, as an OCI image
// layout in a tar archive (devhook_VERSION_linux_ARCH_oci.tar), made without
// a container engine. The archive, every entry owned by 0:0 and stamped with
// the one time given (-created), entries in name order:
//
//	blobs/sha256/<hex>  the image manifest, its config and its one layer
//	                    (tar+gzip), each named by the SHA-256 of its bytes
//	index.json          an image index naming the manifest, with its platform,
//	                    its tag (org.opencontainers.image.ref.name: VERSION)
//	                    and its full name (io.containerd.image.name:
//	                    NAME:VERSION): what podman load, docker load with the
//	                    containerd image store, skopeo and umoci read
//	manifest.json       the same image for docker load's classic image store,
//	                    which reads this file only (docker save writes both)
//	oci-layout          {"imageLayoutVersion":"1.0.0"}
//
// One archive per architecture, each with one image, rather than one index
// of both: docker's classic store loads every image of manifest.json and
// gives the tag to the last one, whatever the machine's architecture.
//
// The layer is a root file system from scratch: the static devhook binary
// (/usr/bin/devhook), /etc/passwd and /etc/group naming root and the user
// nonroot (65532), /etc/nsswitch.conf, the root certificates the relay
// trusts when it asks an ACME server for a certificate (--domain):
// /etc/ssl/certs/ca-certificates.crt, Mozilla's roots from the Go module
// golang.org/x/crypto/x509roots/fallback that go.sum pins, so that every
// build machine writes the same file; /tmp (1777), /home/nonroot and the
// data volume /var/lib/devhook (0700, owned by nonroot), and in
// /usr/share/doc/devhook the LICENSE and a NOTICE saying where the
// certificates come from and under which licence.
//
// The config runs devhook relay serve --addr :4041 --data /var/lib/devhook
// (Entrypoint devhook, Cmd the rest) as 65532:65532, declares the port
// 4041/tcp and the volume, sets SSL_CERT_FILE, and labels the image with
// org.opencontainers.image.* (the manifest carries the same annotations).
//
// Same inputs, same bytes: JSON from encoding/json (struct fields in order,
// map keys sorted), gzip with neither name nor time, tar entries in a fixed
// order with fixed times and owners.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Media types of the OCI image specification.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// The image's user, its data volume and its port.
const (
	nonrootID = 65532
	dataDir   = "/var/lib/devhook"
	relayPort = "4041"
	certFile  = "/etc/ssl/certs/ca-certificates.crt"
	rootsMod  = "golang.org/x/crypto/x509roots/fallback"
)

// imageOptions are pack image's flags.
type imageOptions struct {
	binary   string // the linux binary for arch
	license  string // the LICENSE file
	arch     string // amd64 or arm64
	version  string // the image's tag, as devhook version prints it
	name     string // the image's name without tag
	revision string // the commit, "" when unknown
	source   string // the project's URL
	created  int64  // Unix seconds: every time in the archive
	out      string
}

func runImage(args []string) error {
	var o imageOptions
	f := flag.NewFlagSet("pack image", flag.ContinueOnError)
	f.StringVar(&o.binary, "binary", "", "the static devhook binary for -arch")
	f.StringVar(&o.license, "license", "LICENSE", "the licence file put into the image")
	f.StringVar(&o.arch, "arch", "", "amd64 or arm64")
	f.StringVar(&o.version, "version", "", "the version, which is also the image's tag")
	f.StringVar(&o.name, "name", "localhost/devhook", "the image's name, without tag")
	f.StringVar(&o.revision, "revision", "", "the commit the binary was built from")
	f.StringVar(&o.source, "source", "https://github.com/devhook/devhook", "the project's URL")
	f.Int64Var(&o.created, "created", 0, "the image's time, in Unix seconds (SOURCE_DATE_EPOCH)")
	f.StringVar(&o.out, "o", "", "the archive to write")
	if err := f.Parse(args); err != nil {
		return err
	}
	if o.binary == "" || o.out == "" || o.version == "" {
		return errors.New("pack image needs -binary, -version and -o")
	}
	b, err := buildImage(o)
	if err != nil {
		return err
	}
	return writeFile(o.out, b)
}

// validTag is what a tag of an image reference may be.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// buildImage returns the archive's bytes.
func buildImage(o imageOptions) ([]byte, error) {
	plat, ok := map[string]platform{
		"amd64": {Architecture: "amd64", OS: "linux"},
		"arm64": {Architecture: "arm64", OS: "linux", Variant: "v8"},
	}[o.arch]
	if !ok {
		return nil, fmt.Errorf("image for %q: only amd64 and arm64 are built", o.arch)
	}
	if !validTag.MatchString(o.version) {
		return nil, fmt.Errorf("version %q cannot be an image tag (letters, digits, _ . -)", o.version)
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, fmt.Errorf("read the binary: %w", err)
	}
	if err := checkELF(bin, o.arch); err != nil {
		return nil, fmt.Errorf("%s: %w", o.binary, err)
	}
	license, err := os.ReadFile(o.license)
	if err != nil {
		return nil, fmt.Errorf("read the licence: %w", err)
	}
	created := time.Unix(o.created, 0).UTC()
	roots, rootsVersion, err := caBundle()
	if err != nil {
		return nil, err
	}
	layerTar, err := rootFS(created, []file{
		{name: "usr/bin/devhook", mode: 0o755, body: bin},
		{name: "usr/share/doc/devhook/LICENSE", mode: 0o644, body: license},
		{name: "usr/share/doc/devhook/NOTICE", mode: 0o644, body: []byte(notice(o.version, rootsVersion))},
		{name: strings.TrimPrefix(certFile, "/"), mode: 0o644, body: roots},
	})
	if err != nil {
		return nil, err
	}
	layer, err := gzipped(layerTar)
	if err != nil {
		return nil, err
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       "devhook relay",
		"org.opencontainers.image.description": "devhook's relay: public URLs for agents (devhook listen), deliveries streamed to them over WebSocket",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.url":         o.source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	config, err := json.Marshal(imageConfig{
		Created:      created.Format(time.RFC3339),
		Architecture: plat.Architecture,
		OS:           plat.OS,
		Variant:      plat.Variant,
		Config: runConfig{
			User:         fmt.Sprintf("%d:%d", nonrootID, nonrootID),
			ExposedPorts: map[string]struct{}{relayPort + "/tcp": {}},
			Env:          []string{"PATH=/usr/bin", "SSL_CERT_FILE=" + certFile},
			Entrypoint:   []string{"/usr/bin/devhook"},
			Cmd:          []string{"relay", "serve", "--addr", ":" + relayPort, "--data", dataDir},
			Volumes:      map[string]struct{}{dataDir: {}},
			Labels:       labels,
			StopSignal:   "SIGTERM",
		},
		RootFS: rootFSConfig{Type: "layers", DiffIDs: []string{digest(layerTar)}},
		History: []history{{
			Created:   created.Format(time.RFC3339),
			CreatedBy: "scripts/release",
			Comment:   "devhook " + o.version + ", a static binary on an empty base",
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("encode the image's config: %w", err)
	}
	manifestJSON, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     mediaManifest,
		Config:        describe(mediaConfig, config),
		Layers:        []descriptor{describe(mediaLayer, layer)},
		Annotations:   labels,
	})
	if err != nil {
		return nil, fmt.Errorf("encode the image's manifest: %w", err)
	}
	ref := o.name + ":" + o.version
	top := describe(mediaManifest, manifestJSON)
	top.Platform = &plat
	top.Annotations = map[string]string{
		"org.opencontainers.image.ref.name": o.version,
		"io.containerd.image.name":          ref,
	}
	indexJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{top}})
	if err != nil {
		return nil, fmt.Errorf("encode index.json: %w", err)
	}
	dockerJSON, err := json.Marshal([]dockerImage{{
		Config:   blobPath(config),
		RepoTags: []string{ref},
		Layers:   []string{blobPath(layer)},
	}})
	if err != nil {
		return nil, fmt.Errorf("encode manifest.json: %w", err)
	}

	files := []file{
		{name: "blobs/", mode: 0o755},
		{name: "blobs/sha256/", mode: 0o755},
		{name: "index.json", mode: 0o644, body: indexJSON},
		{name: "manifest.json", mode: 0o644, body: dockerJSON},
		{name: "oci-layout", mode: 0o644, body: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	}
	for _, blob := range [][]byte{manifestJSON, config, layer} {
		files = append(files, file{name: blobPath(blob), mode: 0o644, body: blob})
	}
	return tarball(created, files)
}

// rootFS is the layer's tar: the image's directories and users, and the
// files given.
func rootFS(created time.Time, extra []file) ([]byte, error) {
	files := []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", nonrootID)},
		{name: "etc/nsswitch.conf", mode: 0o644, body: []byte("hosts: files dns\n")},
		{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonrootID, nonrootID)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, owner: nonrootID},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/bin/", mode: 0o755},
		{name: "usr/share/", mode: 0o755},
		{name: "usr/share/doc/", mode: 0o755},
		{name: "usr/share/doc/devhook/", mode: 0o755},
		{name: "var/", mode: 0o755},
		{name: "var/lib/", mode: 0o755},
		{name: strings.TrimPrefix(dataDir, "/") + "/", mode: 0o700, owner: nonrootID},
	}
	return tarball(created, append(files, extra...))
}

// caBundle returns the PEM file of the roots the relay trusts, and the
// version of the module they come from. Roots that NSS trusts only for
// certificates issued before a date are left out: a PEM file cannot say so.
func caBundle() ([]byte, string, error) {
	version := "(unknown version)"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == rootsMod {
				version = dep.Version
			}
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# The root certificates of Mozilla's CA Certificate Program (NSS), from\n# %s %s. See /usr/share/doc/devhook/NOTICE.\n", rootsMod, version)
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, "", fmt.Errorf("write the root certificates: %w", err)
		}
		n++
	}
	if n == 0 {
		return nil, "", errors.New("no root certificates in " + rootsMod)
	}
	return b.Bytes(), version, nil
}

func notice(version, rootsVersion string) string {
	return fmt.Sprintf(`devhook %s, licensed under the Apache License 2.0: see LICENSE.

%s holds the root certificates of
Mozilla's CA Certificate Program (the trust store of NSS), which the relay
trusts when it obtains a certificate from an ACME server (--domain). They are
taken from the Go module %s %s,
which devhook's go.sum pins, and written out as PEM; roots that NSS trusts
only for certificates issued before a date are left out. Mozilla publishes
the certificate data under the Mozilla Public License 2.0
(https://mozilla.org/MPL/2.0/); the Go module is Copyright 2009 The Go
Authors, under a BSD-style licence (https://go.dev/LICENSE). Mount another
file there, or set SSL_CERT_FILE, to trust other roots.
`, version, certFile, rootsMod, rootsVersion)
}

// checkELF says whether bin is a static Linux executable for arch.
func checkELF(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not a Linux executable: %w", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		return fmt.Errorf("built for %v, not %s", f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked: build it with CGO_ENABLED=0")
		}
	}
	return nil
}

// file is an entry of a tar archive: a directory when its name ends in /.
type file struct {
	name  string
	mode  int64
	owner int // uid and gid
	body  []byte
}

// tarball is the tar of files, in name order (a directory before what it
// holds), every entry at time t.
func tarball(t time.Time, files []file) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{
			Name: f.name, Mode: f.mode, Uid: f.owner, Gid: f.owner, ModTime: t,
			Typeflag: tar.TypeReg, Size: int64(len(f.body)), Format: tar.FormatUSTAR,
		}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
		if _, err := w.Write(f.body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return b.Bytes(), nil
}

func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, fmt.Errorf("gzip the layer: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("gzip the layer: %w", err)
	}
	return out.Bytes(), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }

func describe(mediaType string, b []byte) descriptor {
	return descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b))}
}

// The OCI image specification's documents, as much of them as is written.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    *platform         `json:"platform,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	platform struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Variant      string `json:"variant,omitempty"`
	}
	index struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []descriptor `json:"manifests"`
	}
	manifest struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Config        descriptor        `json:"config"`
		Layers        []descriptor      `json:"layers"`
		Annotations   map[string]string `json:"annotations,omitempty"`
	}
	imageConfig struct {
		Created      string       `json:"created"`
		Architecture string       `json:"architecture"`
		OS           string       `json:"os"`
		Variant      string       `json:"variant,omitempty"`
		Config       runConfig    `json:"config"`
		RootFS       rootFSConfig `json:"rootfs"`
		History      []history    `json:"history"`
	}
	runConfig struct {
		User         string              `json:"User"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Volumes      map[string]struct{} `json:"Volumes"`
		Labels       map[string]string   `json:"Labels"`
		StopSignal   string              `json:"StopSignal"`
	}
	rootFSConfig struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	history struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
		Comment   string `json:"comment"`
	}
	// dockerImage is an entry of docker's manifest.json.
	dockerImage struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
)

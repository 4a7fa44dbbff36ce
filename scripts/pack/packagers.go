package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// A Homebrew formula and a Scoop manifest: the archives' URLs, at the base
// where the release is published (-url), and their SHA-256.

// archive is one release archive, devhook_VERSION_OS_ARCH.tar.gz or .zip.
type archive struct {
	OS, Arch string
	URL      string
	SHA256   string
	Dir      string // the one directory it holds: its name without extension
}

// packageOptions are the flags of pack brew and pack scoop.
type packageOptions struct {
	version  string
	base     string
	homepage string
	out      string
	archives []archive
}

func parsePackageFlags(name string, args []string) (packageOptions, error) {
	var o packageOptions
	f := flag.NewFlagSet(name, flag.ContinueOnError)
	f.StringVar(&o.version, "version", "", "the release's version, as in the archives' names")
	f.StringVar(&o.base, "url", "", "where the release's files are published: BASE/ARCHIVE is an archive's URL")
	f.StringVar(&o.homepage, "homepage", "https://github.com/devhook/devhook", "the project's page")
	f.StringVar(&o.out, "o", "", "the file to write")
	if err := f.Parse(args); err != nil {
		return o, err
	}
	if o.version == "" || o.base == "" || o.out == "" || f.NArg() == 0 {
		return o, fmt.Errorf("%s needs -version, -url, -o and the archives", name)
	}
	if err := checkBase(o.base); err != nil {
		return o, err
	}
	for _, path := range f.Args() {
		a, err := readArchive(path, o.version, o.base)
		if err != nil {
			return o, err
		}
		o.archives = append(o.archives, a)
	}
	return o, nil
}

// checkBase refuses a base URL that is not http(s), or that holds what
// would have to be escaped in a Ruby string.
func checkBase(base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("the release URL %q must be an http or https URL", base)
	}
	if strings.ContainsAny(base, "\"\\#$ \t\n'`") {
		return fmt.Errorf("the release URL %q holds a character a formula cannot take (quotes, #, $, backslash, space)", base)
	}
	return nil
}

func readArchive(path, version, base string) (archive, error) {
	name := filepath.Base(path)
	dir, ok := strings.CutSuffix(name, ".tar.gz")
	if !ok {
		dir, ok = strings.CutSuffix(name, ".zip")
	}
	rest, found := strings.CutPrefix(dir, "devhook_"+version+"_")
	osName, arch, split := strings.Cut(rest, "_")
	if !ok || !found || !split {
		return archive{}, fmt.Errorf("%s is not named devhook_%s_OS_ARCH.tar.gz or .zip", name, version)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return archive{}, fmt.Errorf("read the archive: %w", err)
	}
	sum := sha256.Sum256(b)
	return archive{OS: osName, Arch: arch, URL: strings.TrimSuffix(base, "/") + "/" + name,
		SHA256: hex.EncodeToString(sum[:]), Dir: dir}, nil
}

// packageVersion is the version as package managers write it: without
// the leading v of a tag such as v1.2.3.
func packageVersion(v string) string {
	if rest, ok := strings.CutPrefix(v, "v"); ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
		return rest
	}
	return v
}

var formula = template.Must(template.New("devhook.rb").Parse(`# Homebrew formula of devhook {{.Version}}, written by scripts/release. Its URLs
# point at
#   {{.Base}}
# (DEVHOOK_RELEASE_URL): publish the release's archives there, then copy this
# file to Formula/devhook.rb in a tap (a repository named homebrew-TAP) and
# install with: brew install OWNER/TAP/devhook
class Devhook < Formula
  desc "Receive the service's webhooks on your machine, and run their relay"
  homepage "{{.Homepage}}"
  version "{{.PackageVersion}}"
  license "Apache-2.0"
{{range .Systems}}
  on_{{.Name}} do
{{- range .Archives}}
    on_{{.Name}} do
      url "{{.URL}}"
      sha256 "{{.SHA256}}"
    end
{{- end}}
  end
{{end}}
  def install
    bin.install "devhook"
    generate_completions_from_executable(bin/"devhook", "completion")
  end

  test do
    assert_match version.to_s, shell_output("#{bin}/devhook version")
  end
end
`))

func runBrew(args []string) error {
	o, err := parsePackageFlags("pack brew", args)
	if err != nil {
		return err
	}
	type named struct {
		Name string
		archive
	}
	type system struct {
		Name     string
		Archives []named
	}
	var systems []system
	for _, s := range []struct{ os, brew string }{{"darwin", "macos"}, {"linux", "linux"}} {
		sys := system{Name: s.brew}
		for _, a := range []struct{ arch, brew string }{{"arm64", "arm"}, {"amd64", "intel"}} {
			for _, ar := range o.archives {
				if ar.OS == s.os && ar.Arch == a.arch && strings.HasSuffix(ar.URL, ".tar.gz") {
					sys.Archives = append(sys.Archives, named{a.brew, ar})
				}
			}
		}
		if len(sys.Archives) > 0 {
			systems = append(systems, sys)
		}
	}
	if len(systems) == 0 {
		return errors.New("pack brew: no darwin or linux .tar.gz archive given")
	}
	var b bytes.Buffer
	err = formula.Execute(&b, map[string]any{
		"Version": o.version, "PackageVersion": packageVersion(o.version), "Base": o.base,
		"Homepage": o.homepage, "Systems": systems,
	})
	if err != nil {
		return fmt.Errorf("write the formula: %w", err)
	}
	return writeFile(o.out, b.Bytes())
}

// scoopManifest has the fields Scoop needs to install an app from an
// archive per architecture.
type scoopManifest struct {
	Version      string               `json:"version"`
	Description  string               `json:"description"`
	Homepage     string               `json:"homepage"`
	License      string               `json:"license"`
	Architecture map[string]scoopArch `json:"architecture"`
	Bin          string               `json:"bin"`
}

type scoopArch struct {
	URL        string `json:"url"`
	Hash       string `json:"hash"`
	ExtractDir string `json:"extract_dir"`
}

func runScoop(args []string) error {
	o, err := parsePackageFlags("pack scoop", args)
	if err != nil {
		return err
	}
	m := scoopManifest{
		Version:      packageVersion(o.version),
		Description:  "Receive the service's webhooks on your machine, and run their relay",
		Homepage:     o.homepage,
		License:      "Apache-2.0",
		Architecture: map[string]scoopArch{},
		Bin:          "devhook.exe",
	}
	scoopArchs := map[string]string{"amd64": "64bit", "arm64": "arm64"}
	for _, a := range o.archives {
		arch, ok := scoopArchs[a.Arch]
		if a.OS != "windows" || !ok || !strings.HasSuffix(a.URL, ".zip") {
			return fmt.Errorf("pack scoop: %s is not a windows amd64 or arm64 zip", a.URL)
		}
		m.Architecture[arch] = scoopArch{URL: a.URL, Hash: a.SHA256, ExtractDir: a.Dir}
	}
	b, err := json.MarshalIndent(m, "", "    ")
	if err != nil {
		return fmt.Errorf("write the Scoop manifest: %w", err)
	}
	return writeFile(o.out, append(b, '\n'))
}

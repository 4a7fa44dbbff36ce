package scripts

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// stubFormula is just enough of Homebrew's Formula DSL to load a formula
// and print, as JSON, what it says: its fields, and each url with its
// sha256 under the on_macos/on_linux and on_arm/on_intel blocks around it.
const stubFormula = `
require "json"
$meta = {}
$archives = []
$where = {}
class Formula
  def self.desc(s); $meta["desc"] = s; end
  def self.homepage(s); $meta["homepage"] = s; end
  def self.version(s); $meta["version"] = s; end
  def self.license(s); $meta["license"] = s; end
  def self.test(&b); $meta["test"] = !b.nil?; end
  def self.within(key, value)
    raise "#{key} #{value} inside #{$where[key]}" if $where[key]
    $where[key] = value
    yield
    $where.delete(key)
  end
  def self.on_macos(&b); within("os", "darwin", &b); end
  def self.on_linux(&b); within("os", "linux", &b); end
  def self.on_arm(&b); within("arch", "arm64", &b); end
  def self.on_intel(&b); within("arch", "amd64", &b); end
  def self.url(u); $archives << {"os" => $where["os"], "arch" => $where["arch"], "url" => u}; end
  def self.sha256(s); $archives.last["sha256"] = s; end
end
load ARGV[0]
$meta["install"] = Devhook.method_defined?(:install)
$meta["formula"] = Devhook.superclass == Formula
puts JSON.generate({"meta" => $meta, "archives" => $archives})
`

// The Homebrew formula is Ruby that loads, and names each darwin and linux
// archive of the release under its system and architecture, at the release
// URL given (DEVHOOK_RELEASE_URL), with the archive's SHA-256.
func TestHomebrewFormula(t *testing.T) {
	dir := release(t)
	ruby := needTool(t, "ruby", "ruby")
	formula := filepath.Join(dir, "devhook.rb")
	if out, err := exec.Command(ruby, "-c", formula).CombinedOutput(); err != nil {
		t.Fatalf("ruby -c devhook.rb: %v\n%s", err, out)
	}
	stub := filepath.Join(t.TempDir(), "stub.rb")
	if err := os.WriteFile(stub, []byte(stubFormula), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ruby, stub, formula).CombinedOutput()
	if err != nil {
		t.Fatalf("loading devhook.rb: %v\n%s", err, out)
	}
	var got struct {
		Meta     map[string]any
		Archives []struct{ OS, Arch, URL, SHA256 string }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the stub's output: %v\n%s", err, out)
	}
	for k, v := range map[string]any{"version": strings.TrimPrefix(testVersion, "v"), "license": "Apache-2.0",
		"homepage": "https://github.com/devhook/devhook", "install": true, "formula": true, "test": true} {
		if got.Meta[k] != v {
			t.Errorf("the formula's %s: %v, want %v", k, got.Meta[k], v)
		}
	}
	var want, seen []string
	for _, name := range files(t, dir) {
		if strings.HasSuffix(name, ".tar.gz") && !strings.Contains(name, "_windows_") {
			want = append(want, name)
		}
	}
	for _, a := range got.Archives {
		name := strings.TrimPrefix(a.URL, testReleaseURL+"/")
		if name != "devhook_"+testVersion+"_"+a.OS+"_"+a.Arch+".tar.gz" {
			t.Errorf("under on %s/%s: url %s", a.OS, a.Arch, a.URL)
		}
		if a.SHA256 != sha256File(t, filepath.Join(dir, name)) {
			t.Errorf("%s: sha256 %s is not the archive's", name, a.SHA256)
		}
		seen = append(seen, name)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, want) {
		t.Errorf("the formula names %v, the release has %v", seen, want)
	}
}

// The Scoop manifest is JSON with what Scoop needs: version, description,
// homepage, license, bin, and for each windows zip of the release its
// architecture's url, hash and extract_dir (the zip's one directory).
func TestScoopManifest(t *testing.T) {
	dir := release(t)
	b, err := os.ReadFile(filepath.Join(dir, "devhook.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Version, Description, Homepage, License, Bin string
		Architecture                                 map[string]struct {
			URL, Hash  string
			ExtractDir string `json:"extract_dir"`
		}
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("devhook.json: %v\n%s", err, b)
	}
	if m.Version != strings.TrimPrefix(testVersion, "v") || m.License != "Apache-2.0" || m.Bin != "devhook.exe" || m.Description == "" || m.Homepage == "" {
		t.Errorf("devhook.json: %+v", m)
	}
	zipName := "devhook_" + testVersion + "_windows_amd64.zip"
	a, ok := m.Architecture["64bit"]
	if !ok || len(m.Architecture) != 1 {
		t.Fatalf("architectures %v: want 64bit only, as only windows/amd64 was built", m.Architecture)
	}
	if a.URL != testReleaseURL+"/"+zipName || a.Hash != sha256File(t, filepath.Join(dir, zipName)) {
		t.Errorf("64bit: %+v", a)
	}
	zr, err := zip.OpenReader(filepath.Join(dir, zipName))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if !strings.HasPrefix(f.Name, a.ExtractDir+"/") {
			t.Errorf("extract_dir %q, but the zip holds %s", a.ExtractDir, f.Name)
		}
	}
	if !slices.ContainsFunc(zr.File, func(f *zip.File) bool { return f.Name == a.ExtractDir+"/"+m.Bin }) {
		t.Errorf("the zip has no %s/%s", a.ExtractDir, m.Bin)
	}
}

// scripts/pack refuses what would make a broken formula or manifest: a
// release URL with characters a Ruby string interpolates or ends at, an
// archive not named as the release names them, a zip for Homebrew or a
// tarball for Scoop.
func TestPackRefuses(t *testing.T) {
	dir := release(t)
	pack := filepath.Join(t.TempDir(), "pack")
	if out, err := exec.Command("go", "build", "-o", pack, "./pack").CombinedOutput(); err != nil {
		t.Fatalf("go build ./pack: %v\n%s", err, out)
	}
	tgz := filepath.Join(dir, "devhook_"+testVersion+"_linux_amd64.tar.gz")
	zipFile := filepath.Join(dir, "devhook_"+testVersion+"_windows_amd64.zip")
	out := filepath.Join(t.TempDir(), "out")
	for _, args := range [][]string{
		{"brew", "-version", testVersion, "-url", `https://example.com/"x`, "-o", out, tgz},
		{"brew", "-version", testVersion, "-url", "https://example.com/#{x}", "-o", out, tgz},
		{"brew", "-version", testVersion, "-url", "file:///tmp", "-o", out, tgz},
		{"brew", "-version", "v9.9.9", "-url", "https://example.com", "-o", out, tgz},
		{"brew", "-version", testVersion, "-url", "https://example.com", "-o", out, zipFile},
		{"scoop", "-version", testVersion, "-url", "https://example.com", "-o", out, tgz},
		{"image", "-version", "v1+x", "-arch", "amd64", "-binary", tgz, "-o", out},
		{"image", "-version", testVersion, "-arch", "amd64", "-binary", tgz, "-o", out},
	} {
		if b, err := exec.Command(pack, args...).CombinedOutput(); err == nil || !strings.HasPrefix(string(b), "pack: ") {
			t.Errorf("pack %q: %v %s", args, err, b)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("pack %q wrote %s", args, out)
		}
	}
	// A base URL with a slash at its end gives the same URLs.
	if b, err := exec.Command(pack, "brew", "-version", testVersion, "-url", testReleaseURL+"/", "-o", out, tgz).CombinedOutput(); err != nil {
		t.Fatalf("pack brew: %v %s", err, b)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), `url "`+testReleaseURL+"/devhook_") {
		t.Errorf("with a / at the URL's end:\n%s", b)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// The compose files of docs/DEPLOY.md fit the image: its name, its
// volume, a relay serve command whose flags the release's devhook takes
// (run with --help, which parses them), the token from the environment,
// and ports that the command listens on.
func TestDeployComposeFiles(t *testing.T) {
	dir := release(t)
	doc, err := os.ReadFile("../docs/DEPLOY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## In a container")
	section, _, _ = strings.Cut(section, "\n## ")
	bin := ""
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		entries := untar(t, filepath.Join(dir, "devhook_"+testVersion+"_linux_amd64.tar.gz"))
		bin = filepath.Join(t.TempDir(), "devhook")
		if err := os.WriteFile(bin, entries["devhook_"+testVersion+"_linux_amd64/devhook"], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	relays := 0
	for _, block := range strings.Split(section, "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		var compose struct {
			Services map[string]struct {
				Image       string
				Command     []string
				Environment map[string]string
				Ports       []string
				Volumes     []string
			}
		}
		if err := yaml.Unmarshal([]byte(block), &compose); err != nil {
			t.Fatalf("a compose file of DEPLOY.md: %v\n%s", err, block)
		}
		for name, s := range compose.Services {
			if !strings.HasPrefix(s.Image, strings.Split(imageName, ":")[0]+":") {
				continue
			}
			relays++
			cmd := strings.Join(s.Command, " ")
			if !strings.HasPrefix(cmd, "relay serve ") || !strings.Contains(cmd, "--data /var/lib/devhook") {
				t.Errorf("%s: command %q", name, cmd)
			}
			if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/var/lib/devhook") }) {
				t.Errorf("%s: no volume at /var/lib/devhook: %v", name, s.Volumes)
			}
			if !strings.Contains(s.Environment["DEVHOOK_RELAY_TOKEN"], "${DEVHOOK_RELAY_TOKEN") {
				t.Errorf("%s: the token does not come from the environment: %v", name, s.Environment)
			}
			listens := []string{"4041"} // --addr's port; with --domain, the HTTPS and HTTP ones
			if strings.Contains(cmd, "--domain ") {
				listens = []string{"443", "80"}
			}
			for _, p := range s.Ports {
				if i := strings.LastIndex(p, ":"); i < 0 || !slices.Contains(listens, p[i+1:]) {
					t.Errorf("%s: port %s: the relay listens on %v", name, p, listens)
				}
			}
			if bin != "" {
				if out, err := exec.Command(bin, append(s.Command, "--help")...).CombinedOutput(); err != nil {
					t.Errorf("%s: devhook %s --help: %v\n%s", name, cmd, err, out)
				}
			}
		}
	}
	if relays < 2 {
		t.Errorf("%d compose files of the relay in DEPLOY.md's container section, want 2", relays)
	}
}

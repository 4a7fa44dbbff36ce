package cloud

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// ManifestFile is the name of an application's manifest in its directory.
const ManifestFile = "app.yaml"

// Manifest is an application's app.yaml: what to build and what to push.
//
//	type: python            # python, go or java
//	runtime: python:3.11    # the image the service runs it in
//	build:                  # optional: run before packaging, in the directory
//	  command: go build -o main .
//	  environment: {CGO_ENABLED: "0"}
//	pre-push: ./generate.sh # optional: a shell command run after build
//	files:                  # what goes into the package: paths, globs, directories
//	  - main.py
//	  - src/**/*.py
//	  - "!src/**/test_*.py" # a leading ! takes matches out again
//	python:
//	  pip-requirements: requirements.txt   # bundled into the package
//
// Other keys are the service's and are kept in the package as written.
type Manifest struct {
	Type    string         `yaml:"type"`
	Runtime string         `yaml:"runtime"`
	Build   *ManifestBuild `yaml:"build"`
	PrePush string         `yaml:"pre-push"`
	Files   []string       `yaml:"files"`
	Python  *struct {
		PipRequirements string `yaml:"pip-requirements"`
	} `yaml:"python"`

	// Path is the manifest's file; Dir the application's directory.
	Path, Dir string `yaml:"-"`
}

// ManifestBuild is a manifest's build step.
type ManifestBuild struct {
	Command     string            `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
}

// Executable is the file the service runs for each application type.
func Executable(typ string) string {
	switch typ {
	case "python":
		return "main.py"
	case "go":
		return "main"
	case "java":
		return "main.jar"
	}
	return ""
}

// PipRequirements is the manifest's python.pip-requirements, or "".
func (m *Manifest) PipRequirements() string {
	if m.Python == nil {
		return ""
	}
	return m.Python.PipRequirements
}

// ReadManifest reads and checks DIR/app.yaml. Every error names the file
// and what to change.
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: an application's directory needs a manifest with type, runtime and files", p)
	}
	if err != nil {
		return nil, fmt.Errorf("read the manifest: %w", err)
	}
	m := &Manifest{Path: p, Dir: dir}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("%s is not a valid manifest: %w", p, err)
	}
	var problems []string
	switch m.Type {
	case "python", "go", "java":
	case "":
		problems = append(problems, "type is missing (python, go or java)")
	default:
		problems = append(problems, fmt.Sprintf("type %q is not one of python, go and java", m.Type))
	}
	if strings.TrimSpace(m.Runtime) == "" {
		problems = append(problems, "runtime is missing (the image the service runs the application in)")
	}
	if len(m.Files) == 0 {
		problems = append(problems, "files is missing or empty (list what goes into the package: at least "+orDefault(Executable(m.Type), "the executable")+")")
	}
	for i, f := range m.Files {
		if strings.TrimSpace(strings.TrimPrefix(f, "!")) == "" {
			problems = append(problems, fmt.Sprintf("files[%d] is empty", i))
		} else if !localPattern(strings.TrimPrefix(f, "!")) {
			problems = append(problems, fmt.Sprintf("files[%d] %q leaves the application's directory", i, f))
		}
	}
	if m.Build != nil && m.Build.Command == "" && len(m.Build.Environment) > 0 {
		problems = append(problems, "build has an environment but no command")
	}
	if r := m.PipRequirements(); r != "" {
		if m.Type != "python" {
			problems = append(problems, "python.pip-requirements is only for type python")
		} else if !localPattern(r) {
			problems = append(problems, fmt.Sprintf("python.pip-requirements %q leaves the application's directory", r))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", p, strings.Join(problems, "; "))
	}
	return m, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// localPattern says a relative path or pattern stays inside its directory.
func localPattern(p string) bool {
	p = strings.TrimSuffix(filepath.ToSlash(p), "/")
	if p == "" || p == "." {
		return true
	}
	return filepath.IsLocal(filepath.FromSlash(p))
}

// ResolveFiles returns the files the manifest lists, as slash-separated
// paths relative to its directory, sorted. An entry is a path, a glob
// (* ? [..] within a name, ** across directories; a wildcard matches a
// name starting with "." only when the pattern's name starts with "." too)
// or a directory, which stands for every file under it; "!pattern" takes
// matches of the entries before it out. An entry that matches nothing is
// an error naming it.
func (m *Manifest) ResolveFiles() ([]string, error) {
	var all []string
	err := filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() || (d.Type()&fs.ModeSymlink != 0 && isRegular(p)) {
			rel, _ := filepath.Rel(m.Dir, p)
			all = append(all, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the files of %s: %w", m.Dir, err)
	}
	chosen := map[string]bool{}
	var missing []string
	for _, entry := range m.Files {
		neg := strings.HasPrefix(entry, "!")
		pat := strings.TrimSuffix(filepath.ToSlash(strings.TrimPrefix(entry, "!")), "/")
		pat = strings.TrimPrefix(pat, "./")
		n := 0
		for _, f := range all {
			if matchPath(pat, f) {
				n++
				if neg {
					delete(chosen, f)
				} else {
					chosen[f] = true
				}
			}
		}
		if n == 0 && !neg {
			missing = append(missing, entry)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lists files that are not in %s: %s", m.Path, m.Dir, strings.Join(missing, ", "))
	}
	files := make([]string, 0, len(chosen))
	for f := range chosen {
		files = append(files, f)
	}
	sort.Strings(files)
	exe := Executable(m.Type)
	if !chosen[exe] {
		return nil, fmt.Errorf("%s: a %s application needs %s in its package, but files does not list it (or it was not built)", m.Path, m.Type, exe)
	}
	return files, nil
}

func isRegular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// matchPath matches a slash-separated pattern against a file: name by
// name, ** standing for any number of directories; a file under a
// directory the pattern names matches too.
func matchPath(pattern, file string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(file, "/"))
}

func matchSegs(ps, names []string) bool {
	if len(ps) == 0 {
		return true // the pattern named a directory above the file (or the file)
	}
	if ps[0] == "**" {
		for i := 0; i < len(names); i++ {
			if i > 0 && strings.HasPrefix(names[i-1], ".") {
				return false // ** does not go into hidden directories
			}
			if matchSegs(ps[1:], names[i:]) {
				return true
			}
		}
		return false
	}
	if len(names) == 0 {
		return false
	}
	if strings.HasPrefix(names[0], ".") && !strings.HasPrefix(ps[0], ".") && strings.ContainsAny(ps[0], "*?[") {
		return false
	}
	ok, err := filepath.Match(ps[0], names[0])
	if err != nil || !ok {
		return false
	}
	return matchSegs(ps[1:], names[1:])
}

package devhook_test

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// errwrapSkip lists what TestNoErrorFormattedWithV does not look at yet:
// packages (import path relative to the module, a trailing "/..." for the
// tree under it) and single files (relative to the module's root) whose
// owners change them in this round. Empty it, entry by entry, as they land.
var errwrapSkip = []string{}

// TestNoErrorFormattedWithV fails where an error is formatted into another
// error with %v or %s (the error itself, or its Error()) by fmt.Errorf or
// devhook.Errorf: %w keeps the chain, errors.Is and errors.As then see the
// cause. It type-checks every package of the module (not its tests) against
// the export data `go list -export` gives, as go vet does.
func TestNoErrorFormattedWithV(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the export data of the whole module")
	}
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,Module,Standard", "./...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
		Standard                bool
		Module                  *struct{ Path, Dir string }
	}
	var pkgs []pkg
	exports := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		pkgs = append(pkgs, p)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, errors.New("no export data for " + path)
		}
		return os.Open(f)
	})
	errType := types.Universe.Lookup("error").Type().Underlying().(*types.Interface)
	checked := 0
	for _, p := range pkgs {
		if p.Standard || p.Module == nil || p.Module.Path != "github.com/devhook/devhook" {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, p.Module.Path), "/")
		if skipped(rel) {
			continue
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			relFile, _ := filepath.Rel(p.Module.Dir, path)
			if skipped(filepath.ToSlash(relFile)) {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp, Error: func(error) {}} // a skipped file may be missing: check what remains
		conf.Check(p.ImportPath, fset, files, info)
		checked++
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isErrorf(info, call) || len(call.Args) < 1 {
					return true
				}
				format := formatIndex(info, call)
				tv, ok := info.Types[call.Args[format]]
				if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
					return true
				}
				args := call.Args[format+1:]
				for i, verb := range verbs(constant.StringVal(tv.Value)) {
					if i >= len(args) || (verb != 'v' && verb != 's') {
						continue
					}
					if isError(info, args[i], errType) {
						t.Errorf("%s: an error formatted with %%%c: use %%w to keep its chain", relPos(fset, p.Module.Dir, args[i].Pos()), verb)
					}
				}
				return true
			})
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked: the walk is broken", checked)
	}
}

func skipped(rel string) bool {
	for _, s := range errwrapSkip {
		if rel == s || (strings.HasSuffix(s, "/...") && (rel == strings.TrimSuffix(s, "/...") || strings.HasPrefix(rel, strings.TrimSuffix(s, "...")))) {
			return true
		}
	}
	return false
}

func relPos(fset *token.FileSet, root string, pos token.Pos) string {
	p := fset.Position(pos)
	if r, err := filepath.Rel(root, p.Filename); err == nil {
		p.Filename = r
	}
	return p.String()
}

// isErrorf says whether call is fmt.Errorf or devhook.Errorf.
func isErrorf(info *types.Info, call *ast.CallExpr) bool {
	var id *ast.Ident
	switch fun := call.Fun.(type) {
	case *ast.SelectorExpr:
		id = fun.Sel
	case *ast.Ident:
		id = fun
	default:
		return false
	}
	fn, ok := info.Uses[id].(*types.Func)
	if !ok || fn.Pkg() == nil {
		return false
	}
	name := fn.Pkg().Path() + "." + fn.Name()
	return name == "fmt.Errorf" || name == "github.com/devhook/devhook.Errorf"
}

// formatIndex is the index of the format argument: devhook.Errorf takes a
// code first.
func formatIndex(info *types.Info, call *ast.CallExpr) int {
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		if fn, ok := info.Uses[sel.Sel].(*types.Func); ok && fn.Pkg().Path() != "fmt" {
			return 1
		}
	} else if id, ok := call.Fun.(*ast.Ident); ok {
		if fn, ok := info.Uses[id].(*types.Func); ok && fn.Pkg().Path() != "fmt" {
			return 1
		}
	}
	return 0
}

// isError says whether e is an error or the Error() of one.
func isError(info *types.Info, e ast.Expr, errType *types.Interface) bool {
	if tv, ok := info.Types[e]; ok && tv.Type != nil && types.Implements(tv.Type, errType) {
		return true
	}
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Error" {
		return false
	}
	tv, ok := info.Types[sel.X]
	return ok && tv.Type != nil && types.Implements(tv.Type, errType)
}

// verbs returns the verb of each argument a format consumes, in order (a
// '*' width or precision consumes one too, returned as '*').
func verbs(format string) []rune {
	var out []rune
	rs := []rune(format)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '%' {
			continue
		}
		i++
		for ; i < len(rs); i++ {
			c := rs[i]
			if c == '*' {
				out = append(out, '*')
				continue
			}
			if strings.ContainsRune("+-# 0.123456789[]", c) {
				continue
			}
			if c != '%' {
				out = append(out, c)
			}
			break
		}
	}
	return out
}

func TestVerbs(t *testing.T) {
	got := string(verbs("a %v %% %-5s %*d %.2f %w %q"))
	if got != "vs*dfwq" {
		t.Fatalf("verbs: %q", got)
	}
}

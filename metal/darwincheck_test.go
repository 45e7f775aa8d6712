package metal

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// darwinChecker type-checks packages as they build on darwin/arm64 with
// cgo, which cannot be compiled off a Mac: Go files are selected by the
// darwin build context, `import "C"` is faked, and darwinkit is
// type-checked from its sources in the module cache under the same
// context. Other packages (the standard library, this module's packages
// but the one checked, gonum) come from the host's export data; their APIs
// do not depend on the OS.
type darwinChecker struct {
	ctx   build.Context
	fset  *token.FileSet
	gc    types.Importer
	pkgs  map[string]*types.Package
	dir   string
	errs  []error
	patch map[string]string // file name -> replacement source, for tests
}

func newDarwinChecker(t *testing.T, dir string) *darwinChecker {
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = "darwin", "arm64", true
	// The host's export data of every dependency of this package.
	out, err := osexec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	export := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(l, "\t"); ok && file != "" {
			export[path] = file
		}
	}
	lookup := func(path string) (io.ReadCloser, error) {
		f, ok := export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}
	fset := token.NewFileSet()
	return &darwinChecker{ctx: ctx, fset: fset, gc: importer.ForCompiler(fset, "gc", lookup),
		pkgs: map[string]*types.Package{}, dir: dir}
}

func (c *darwinChecker) Import(path string) (*types.Package, error) {
	return c.ImportFrom(path, c.dir, 0)
}

func (c *darwinChecker) ImportFrom(path, dir string, _ types.ImportMode) (*types.Package, error) {
	if p := c.pkgs[path]; p != nil {
		return p, nil
	}
	if !strings.HasPrefix(path, "github.com/progrium/darwinkit") {
		return c.gc.Import(path)
	}
	bp, err := c.ctx.Import(path, dir, 0)
	if err != nil {
		return nil, err
	}
	return c.check(bp)
}

// check parses and type-checks the darwin files of bp.
func (c *darwinChecker) check(bp *build.Package) (*types.Package, error) {
	var files []*ast.File
	for _, name := range append(append([]string{}, bp.GoFiles...), bp.CgoFiles...) {
		full := filepath.Join(bp.Dir, name)
		var src any
		if s, ok := c.patch[name]; ok && bp.Dir == c.dir {
			src = s
		}
		f, err := parser.ParseFile(c.fset, full, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{
		Importer:    c,
		FakeImportC: true,
		Error:       func(err error) { c.errs = append(c.errs, err) },
	}
	p, _ := conf.Check(bp.ImportPath, c.fset, files, nil)
	c.pkgs[bp.ImportPath] = p
	return p, nil
}

// checkDarwin type-checks package metal as it builds on darwin, with the
// named files' sources replaced, and returns the type errors.
func checkDarwin(t *testing.T, patch map[string]string) []error {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := newDarwinChecker(t, dir)
	c.patch = patch
	bp, err := c.ctx.ImportDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(bp.CgoFiles, "gpu_darwin.go") || contains(bp.GoFiles, "gpu_other.go") {
		t.Fatalf("the darwin build context selects %v and %v, want gpu_darwin.go and not gpu_other.go", bp.GoFiles, bp.CgoFiles)
	}
	bp.ImportPath = "github.com/gdnback/gdnback/metal"
	if _, err := c.check(bp); err != nil {
		t.Fatal(err)
	}
	return c.errs
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestDarwinTypeCheck type-checks the darwin host (gpu_darwin.go against
// darwinkit v0.5.0) on any OS and fails on any type error.
func TestDarwinTypeCheck(t *testing.T) {
	for _, err := range checkDarwin(t, nil) {
		t.Error(err)
	}
}

// TestDarwinTypeCheckFails checks that the type check catches a planted
// error: SetBufferOffsetAtIndex (without the underscore) is darwinkit's
// other method, which takes no buffer.
func TestDarwinTypeCheckFails(t *testing.T) {
	src, err := os.ReadFile("gpu_darwin.go")
	if err != nil {
		t.Fatal(err)
	}
	const good = "enc.SetBufferOffsetAtIndex_(src, 0, 1)"
	if !strings.Contains(string(src), good) {
		t.Fatalf("gpu_darwin.go has no %q to plant the error in", good)
	}
	bad := strings.Replace(string(src), good, "enc.SetBufferOffsetAtIndex(src, 0, 1)", 1)
	errs := checkDarwin(t, map[string]string{"gpu_darwin.go": bad})
	if len(errs) == 0 {
		t.Fatal("the planted type error in gpu_darwin.go went unnoticed")
	}
	var te types.Error
	if !errors.As(errs[0], &te) || !strings.HasSuffix(te.Fset.Position(te.Pos).Filename, "gpu_darwin.go") {
		t.Fatalf("got %v, want a type error in gpu_darwin.go", errs[0])
	}
	t.Logf("caught: %v", errs[0])
}

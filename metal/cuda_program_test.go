package metal

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var (
	cudaProgramDir  = flag.String("cuda.program", "", "TestCUDAProgramFiles: a folder to write the program NVRTC compiles into (gdn_cuda.cu, its headers, options), for scripts/h200/sass_counts.py")
	cudaProgramArch = flag.String("cuda.arch", "sm_90", "TestCUDAProgramFiles: the architecture of the options written")
)

// TestCUDAProgramFiles: the translation unit NVRTC compiles includes each
// of its headers by the name it is given under, and every kernel's
// trampoline is in it. With -cuda.program DIR it writes the program, as
// nvrtcCompile hands it to NVRTC, into DIR: gdn_cuda.cu, metal_stdlib,
// kernel.metal, and options (cudaOptions for -cuda.arch, one a line), so
// that scripts/h200/sass_counts.py can compile it on a GPU machine, which
// has no Go, and count each kernel's SASS instructions.
func TestCUDAProgramFiles(t *testing.T) {
	ks, err := cudaKernels(source)
	if err != nil {
		t.Fatal(err)
	}
	tu, names, hdrs := cudaSources(source, ks)
	if len(names) != len(hdrs) {
		t.Fatalf("%d header names for %d headers", len(names), len(hdrs))
	}
	// kernel.metal is the source with its [[threadgroup(N)]] attributes
	// blanked (withoutThreadgroupAttrs; TestCUDAProgram checks the blanking).
	want := map[string]string{"metal_stdlib": string(cudaPrelude), "kernel.metal": string(withoutThreadgroupAttrs(source))}
	for i, n := range names {
		if hdrs[i] != want[n] {
			t.Errorf("header %q does not hold what its name says", n)
		}
		if !strings.Contains(tu, "#include <"+n+">") && !strings.Contains(tu, "#include \""+n+"\"") {
			t.Errorf("the unit does not include %q", n)
		}
	}
	for _, k := range ks {
		if !strings.Contains(tu, " "+k.name+"(") {
			t.Errorf("the unit has no trampoline for %s", k.name)
		}
	}
	if *cudaProgramDir == "" {
		return // nothing to write: the files are written with -cuda.program DIR
	}
	dir := *cudaProgramDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"gdn_cuda.cu": tu, "options": strings.Join(cudaOptions(*cudaProgramArch), "\n") + "\n"}
	for i, n := range names {
		files[n] = hdrs[i]
	}
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d files into %s", len(files), dir)
}

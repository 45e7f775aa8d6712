package metal

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// clangCUDAFlags check CUDA device code for sm_90 without the CUDA
// toolkit (Debian's clang-16 in CUDA mode): no CUDA headers or libdevice, so the check
// stops at LLVM IR (emitting PTX would need libdevice's expf).
var clangCUDAFlags = []string{
	"-x", "cuda", "--cuda-gpu-arch=sm_90", "--cuda-device-only", "-nocudainc", "-nocudalib",
	"-Xclang", "-target-feature", "-Xclang", "+ptx78", "-std=c++17",
	"-Wno-unknown-attributes", "-S", "-emit-llvm", "-o", os.DevNull,
}

// clangCUDA compiles src behind the CUDA prelude with clang in CUDA mode
// and returns clang's output and error.
func clangCUDA(t *testing.T, clang string, src []byte) (string, error) {
	t.Helper()
	ks, err := cudaKernels(src)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"metal_stdlib": cudaPrelude,
		"kernel.metal": withoutThreadgroupAttrs(withoutHostNames(src)),
		"gdn_cuda.cu":  []byte(cudaProgram(ks, true)),
	}
	return runClang(t, clang, files, "gdn_cuda.cu", clangCUDAFlags)
}

// runClang writes files into a new folder and runs clang with flags, the
// folder as include path, on the file named main; it returns clang's
// output, with the folder's path taken out, and its error.
func runClang(t *testing.T, clang string, files map[string][]byte, main string, flags []string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := append(append([]string{}, flags...), "-I", dir, filepath.Join(dir, main))
	t.Logf("$ %s %s", clang, strings.Join(args, " "))
	out, err := exec.Command(clang, args...).CombinedOutput()
	return strings.ReplaceAll(string(out), dir+string(filepath.Separator), ""), err
}

// requireClang returns the clang of the source checks: $GDN_CLANG, else
// clang-16. Without it the test skips, unless $GDN_REQUIRE_CLANG is set
// (scripts/ci.d/20-clang.sh sets it after installing clang-16).
func requireClang(t *testing.T) string {
	t.Helper()
	clang := os.Getenv("GDN_CLANG")
	if clang == "" {
		clang = "clang-16"
	}
	if _, err := exec.LookPath(clang); err != nil {
		if os.Getenv("GDN_REQUIRE_CLANG") != "" {
			t.Fatalf("%s not found: %v", clang, err)
		}
		t.Skipf("%s not found (scripts/ci.d/20-clang.sh installs it): %v", clang, err)
	}
	return clang
}

// TestCUDAClang compiles gdn.metal behind the CUDA prelude, with the
// generated trampolines, with clang in CUDA mode (requireClang's): the CI
// check that a kernel change keeps the CUDA path building, where no GPU or
// toolkit is. A planted error must fail it.
func TestCUDAClang(t *testing.T) {
	clang := requireClang(t)
	if out, err := clangCUDA(t, clang, source); err != nil {
		t.Fatalf("gdn.metal behind the CUDA prelude does not compile with %s: %v\n%s", clang, err, out)
	}
	bad := strings.Replace(string(source), "const float4 u = simd_sum(up);", "const float4 u = simd_sum(up, 1);", 1)
	if bad == string(source) {
		t.Fatal("the planted error's line is not in gdn.metal")
	}
	out, err := clangCUDA(t, clang, []byte(bad))
	if err == nil || !strings.Contains(out, "kernel.metal:") {
		t.Errorf("a planted error compiled (err %v):\n%s", err, out)
	} else {
		t.Logf("the planted error fails the check, as it should:\n%s", firstLines(out, 4))
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

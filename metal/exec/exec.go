//go:build cgo

package exec

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*gdnx_launch_fn)(const char*, const void*, size_t, void* const*, int,
                              const uint32_t*, const uint32_t*, size_t, int, uint64_t, int, char*, size_t);

static int gdnx_call_launch(void* f, const char* name, const void* args, size_t args_size,
                            void* const* bufs, int nbufs, const uint32_t* grid, const uint32_t* ntg,
                            size_t shmem, int policy, uint64_t seed, int workers, char* err, size_t errlen) {
	return ((gdnx_launch_fn)f)(name, args, args_size, bufs, nbufs, grid, ntg, shmem, policy, seed, workers, err, errlen);
}
*/
import "C"

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

//go:embed include
var prelude embed.FS

// Module is a compiled kernel source, loaded into the process. Modules are
// never unloaded.
type Module struct {
	// Kernels are the names Launch accepts, as the source's host_name
	// attributes and plain kernel functions give them.
	Kernels []string
	launch  unsafe.Pointer
	path    string
}

var (
	modMu   sync.Mutex
	modules = map[string]*Module{}
)

// Compile compiles MSL source for the CPU and loads it. The same source
// compiled twice returns the same Module.
func Compile(source []byte) (*Module, error) {
	kernels, entries, err := entryTable(source)
	if err != nil {
		return nil, err
	}
	cxx, err := compiler()
	if err != nil {
		return nil, err
	}
	flags := []string{"-std=c++20", "-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden"}
	version, _ := osexec.Command(cxx, "--version").Output()
	if bytes.Contains(version, []byte("clang")) {
		flags = append(flags, "-Wno-unknown-attributes", "-Wno-ignored-attributes")
	} else {
		// -fno-gnu-unique keeps the runtime's function-local statics
		// private to each module when several are loaded.
		flags = append(flags, "-Wno-attributes", "-fno-gnu-unique")
	}

	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", cxx, version, strings.Join(flags, " "), runtime.GOOS+"/"+runtime.GOARCH)
	h.Write(source)
	h.Write([]byte(entries))
	err = fs.WalkDir(prelude, "include", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := prelude.ReadFile(p)
		fmt.Fprintf(h, "\x00%s\x00", p)
		h.Write(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]

	modMu.Lock()
	defer modMu.Unlock()
	if m := modules[key]; m != nil {
		return m, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return nil, err
	}
	so := filepath.Join(dir, key+".so")
	if _, err := os.Stat(so); err != nil {
		if err := build(cxx, flags, source, entries, so); err != nil {
			return nil, err
		}
	}
	m, err := load(so)
	if err != nil {
		return nil, err
	}
	m.Kernels = kernels
	modules[key] = m
	return m, nil
}

// compiler finds a C++ compiler.
func compiler() (string, error) {
	if c := os.Getenv("CXX"); c != "" {
		if p, err := osexec.LookPath(c); err == nil {
			return p, nil
		}
	}
	for _, c := range []string{"c++", "g++", "clang++"} {
		if p, err := osexec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("exec: no C++ compiler found ($CXX, c++, g++ or clang++); the CPU executor compiles the kernel source at run time (on Debian: apt-get install g++)")
}

// cacheDir is where compiled modules are kept.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "gdnback", "msl-exec")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("exec: module cache: %w", err)
	}
	return dir, nil
}

// build compiles source into the shared object so, atomically.
func build(cxx string, flags []string, source []byte, entries, so string) error {
	dir, err := os.MkdirTemp(filepath.Dir(so), "build-")
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	defer os.RemoveAll(dir)
	inc := filepath.Join(dir, "include")
	if err := os.MkdirAll(inc, 0o755); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	files, _ := fs.ReadDir(prelude, "include")
	for _, f := range files {
		b, err := prelude.ReadFile("include/" + f.Name())
		if err != nil {
			return fmt.Errorf("exec: %w", err)
		}
		if err := os.WriteFile(filepath.Join(inc, f.Name()), b, 0o644); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel.metal"), source, 0o644); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "module.cc"), []byte(entries), 0o644); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	tmp := filepath.Join(dir, "module.so")
	args := append(append([]string{}, flags...), "-I", inc, "-o", tmp, filepath.Join(dir, "module.cc"))
	cmd := osexec.Command(cxx, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &CompileError{Compiler: cxx, Status: err.Error(), Log: strings.ReplaceAll(string(out), dir+string(filepath.Separator), "")}
	}
	if err := os.Rename(tmp, so); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	return nil
}

// load opens a compiled module.
func load(so string) (*Module, error) {
	cs := C.CString(so)
	defer C.free(unsafe.Pointer(cs))
	h := C.dlopen(cs, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("exec: loading %s: %s", so, C.GoString(C.dlerror()))
	}
	sym := func(name string) unsafe.Pointer {
		cn := C.CString(name)
		defer C.free(unsafe.Pointer(cn))
		return C.dlsym(h, cn)
	}
	l := sym("gdnx_launch")
	if l == nil {
		return nil, fmt.Errorf("exec: %s has no gdnx_launch", so)
	}
	return &Module{launch: l, path: so}, nil
}

var (
	// template [[host_name("name")]] kernel type func<args>;
	hostNameRE = regexp.MustCompile(`template\s*\[\[\s*host_name\(\s*"(\w+)"\s*\)\s*\]\]\s*kernel\s+\w+\s+(\w+\s*<[^;>]*>)\s*;`)
	// kernel void name(   at the start of a line
	kernelRE   = regexp.MustCompile(`(?m)^kernel\s+void\s+(\w+)\s*\(`)
	templateRE = regexp.MustCompile(`template\s*<[^>]*>\s*$`)
)

// entryTable finds the kernels of source and returns their names and the
// C++ translation unit that includes source and exports the launcher.
func entryTable(source []byte) ([]string, string, error) {
	var names, items []string
	for _, m := range hostNameRE.FindAllSubmatch(source, -1) {
		names = append(names, string(m[1]))
		items = append(items, fmt.Sprintf("gdnrt::make_entry<&%s>(%q)", m[2], m[1]))
	}
	for _, ix := range kernelRE.FindAllSubmatchIndex(source, -1) {
		// A kernel template is instantiated by host_name above.
		if templateRE.Match(bytes.TrimRight(source[:ix[0]], " \t\r\n")) {
			continue
		}
		name := string(source[ix[2]:ix[3]])
		names = append(names, name)
		items = append(items, fmt.Sprintf("gdnrt::make_entry<&%s>(%q)", name, name))
	}
	if len(names) == 0 {
		return nil, "", errors.New("exec: the source defines no kernel (no host_name instantiation, no `kernel void` at the start of a line)")
	}
	var b strings.Builder
	b.WriteString("// The executor's module: the kernel source behind the MSL prelude.\n")
	b.WriteString("#include <metal_stdlib>\n#include \"kernel.metal\"\n\n")
	b.WriteString("static const gdnrt::entry gdnx_entries[] = {\n")
	for _, it := range items {
		b.WriteString("    " + it + ",\n")
	}
	b.WriteString("};\n\n")
	b.WriteString(`extern "C" __attribute__((visibility("default"))) int gdnx_launch(
        const char* name, const void* args, size_t args_size, void* const* bufs, int nbufs,
        const uint32_t* grid, const uint32_t* ntg, size_t shmem, int policy, uint64_t seed, int workers,
        char* err, size_t errlen) {
    return gdnrt::launch(gdnx_entries, sizeof gdnx_entries / sizeof gdnx_entries[0], name, args, args_size,
                         bufs, nbufs, grid, ntg, shmem, policy, seed, workers, err, errlen);
}
`)
	return names, b.String(), nil
}

// Buffer is memory the kernels can read and write, outside Go's heap (as a
// Metal buffer is outside the host's).
type Buffer struct {
	p unsafe.Pointer
	n int
}

// NewBuffer allocates n zeroed bytes.
func NewBuffer(n int) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("exec: buffer of %d bytes", n)
	}
	p := C.calloc(C.size_t(max(n, 16)), 1)
	if p == nil {
		return nil, fmt.Errorf("exec: cannot allocate a buffer of %d bytes", n)
	}
	b := &Buffer{p: p, n: n}
	runtime.SetFinalizer(b, (*Buffer).Free)
	return b, nil
}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int { return b.n }

// Floats views the buffer as float32s. The view is valid until Free.
func (b *Buffer) Floats() []float32 {
	if b.p == nil {
		return nil
	}
	return unsafe.Slice((*float32)(b.p), b.n/4)
}

// Free releases the buffer's memory.
func (b *Buffer) Free() {
	if b.p != nil {
		C.free(b.p)
		b.p = nil
		b.n = 0
	}
}

// Launch runs d and returns when every threadgroup has finished. The error
// of a failed launch names the kernel and says what went wrong (an unknown
// kernel, a mismatched args size, a deadlock with the threads' positions).
func (m *Module) Launch(d Dispatch, s Schedule) error {
	for i := range 3 {
		if d.Grid[i] < 0 || d.Threads[i] < 1 || d.Grid[i] >= 1<<31 || d.Threads[i] > 1024 {
			return fmt.Errorf("exec: %s: grid %v, threads %v out of range", d.Kernel, d.Grid, d.Threads)
		}
	}
	if len(d.Args) == 0 {
		return fmt.Errorf("exec: %s: no args", d.Kernel)
	}
	bufs := make([]unsafe.Pointer, max(len(d.Buffers), 1))
	for i, b := range d.Buffers {
		if b == nil || b.p == nil {
			return fmt.Errorf("exec: %s: buffer %d is nil or freed", d.Kernel, i)
		}
		bufs[i] = b.p
	}
	workers := s.Workers
	if workers <= 0 {
		workers = min(runtime.GOMAXPROCS(0), DefaultMaxWorkers)
	}
	grid := [3]C.uint32_t{C.uint32_t(d.Grid[0]), C.uint32_t(d.Grid[1]), C.uint32_t(d.Grid[2])}
	ntg := [3]C.uint32_t{C.uint32_t(d.Threads[0]), C.uint32_t(d.Threads[1]), C.uint32_t(d.Threads[2])}
	name := C.CString(d.Kernel)
	defer C.free(unsafe.Pointer(name))
	errbuf := (*C.char)(C.calloc(4096, 1))
	defer C.free(unsafe.Pointer(errbuf))
	rc := C.gdnx_call_launch(m.launch, name, unsafe.Pointer(&d.Args[0]), C.size_t(len(d.Args)),
		(*unsafe.Pointer)(unsafe.Pointer(&bufs[0])), C.int(len(d.Buffers)), &grid[0], &ntg[0],
		C.size_t(d.Shared), C.int(s.Policy), C.uint64_t(s.Seed), C.int(workers), errbuf, 4096)
	runtime.KeepAlive(d.Buffers)
	if rc != 0 {
		return fmt.Errorf("exec: %s: %s", d.Kernel, C.GoString(errbuf))
	}
	return nil
}

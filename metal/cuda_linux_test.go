//go:build linux

package metal

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

// TestCUDAWithoutDriver: where libcuda.so.1 does not load, Open(CUDA)
// fails with ErrNoCUDA and says why; likewise without NVRTC.
func TestCUDAWithoutDriver(t *testing.T) {
	saved, savedNV := libcudaNames, libnvrtcNames
	t.Cleanup(func() { libcudaNames, libnvrtcNames = saved, savedNV })
	t.Setenv("GDN_LIBCUDA", "")
	t.Setenv("GDN_LIBNVRTC", "")
	libcudaNames = []string{"libcuda-absent-for-the-test.so.1"}
	_, err := Open(CUDA)
	if !errors.Is(err, ErrNoCUDA) || !strings.Contains(err.Error(), "no NVIDIA driver (libcuda.so.1 does not load") ||
		!strings.Contains(err.Error(), "libcuda-absent-for-the-test.so.1") {
		t.Errorf("Open(cuda) without libcuda: %v", err)
	}
	libnvrtcNames = []string{"libnvrtc-absent-for-the-test.so"}
	if _, err := loadNVRTC(); !errors.Is(err, ErrNoCUDA) || !strings.Contains(err.Error(), "GDN_LIBNVRTC") {
		t.Errorf("loading NVRTC where there is none: %v", err)
	}
	// A library that loads but is not libcuda: the missing entry point is named.
	libcudaNames = []string{"libc.so.6"}
	if _, err := loadDriver(); err == nil || !strings.Contains(err.Error(), "libc.so.6 has no cu") {
		t.Errorf("libc as libcuda: %v", err)
	}
}

// TestNVRTCVersion: an NVRTC older than minNVRTCMajor is refused as
// ErrNoCUDA, naming the library and its version, before it compiles
// anything; 12 and 13 pass; a failing nvrtcVersion is an error.
func TestNVRTCVersion(t *testing.T) {
	for _, c := range []struct {
		maj, mnr int32
		r        cuResult
		want     string // "" for no error
	}{
		{11, 8, 0, "libnvrtc.so is NVRTC 11.8, which crashes compiling the kernels; the runner needs NVRTC 12 or later"},
		{12, 0, 0, ""},
		{13, 0, 0, ""},
		{0, 0, 7, "libnvrtc.so: nvrtcVersion failed (7)"},
	} {
		n := &nvrtcLib{
			nvrtcVersion: func(major, minor *int32) cuResult {
				*major, *minor = c.maj, c.mnr
				return c.r
			},
			nvrtcCreateProgram: func(*uintptr, string, string, int32, unsafe.Pointer, unsafe.Pointer) cuResult {
				t.Fatal("the version check compiled a program")
				return 1
			},
		}
		err := n.checkVersion("libnvrtc.so")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("NVRTC %d.%d: %v", c.maj, c.mnr, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("NVRTC %d.%d (status %d): %v, want %q", c.maj, c.mnr, c.r, err, c.want)
		case c.r == 0 && c.want != "" && !errors.Is(err, ErrNoCUDA):
			t.Errorf("NVRTC %d.%d: %v is not ErrNoCUDA", c.maj, c.mnr, err)
		}
	}
}

//go:build linux

package metal

import (
	"errors"
	"strings"
	"testing"
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

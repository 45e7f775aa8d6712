package main

import "golang.org/x/sys/unix"

// darwinMemory reads the physical memory size (sysctl hw.memsize).
func darwinMemory() (int64, bool) {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil || n == 0 || n > 1<<62 {
		return 0, false
	}
	return int64(n), true
}

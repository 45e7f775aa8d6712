//go:build linux || darwin

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestMain lets a test run gdn as a child process: the test binary, run
// with GDN_TEST_CHILD=1, is the command.
func TestMain(m *testing.M) {
	if os.Getenv("GDN_TEST_CHILD") == "1" {
		st := run(os.Args[1:], os.Stdout, os.Stderr)
		if path := os.Getenv("GDN_TEST_RSS"); path != "" {
			os.WriteFile(path, []byte(strconv.FormatInt(peakRSS(), 10)), 0o644)
		}
		os.Exit(st)
	}
	os.Exit(m.Run())
}

// childResult is a child gdn's exit status, output and peak resident
// memory in bytes.
type childResult struct {
	status         int
	stdout, stderr string
	maxRSS         int64
}

// runChild runs gdn with args in a child process and measures it.
func runChild(t testing.TB, args ...string) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	rss := filepath.Join(t.TempDir(), "rss")
	cmd.Env = append(os.Environ(), "GDN_TEST_CHILD=1", "GDN_TEST_RSS="+rss)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	r := childResult{status: cmd.ProcessState.ExitCode(), stdout: o.String(), stderr: e.String()}
	b, err := os.ReadFile(rss)
	if err != nil {
		t.Fatalf("the child did not report its peak memory: %v\n%s", err, r.stderr)
	}
	r.maxRSS, _ = strconv.ParseInt(string(b), 10, 64)
	return r
}

// peakRSS is this process's peak resident memory in bytes: VmHWM of
// /proc/self/status on Linux (getrusage there would report the parent's
// memory too, from before exec), getrusage elsewhere.
func peakRSS() int64 {
	if runtime.GOOS == "linux" {
		b, _ := os.ReadFile("/proc/self/status")
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
		return -1
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return int64(ru.Maxrss) // bytes on darwin
}

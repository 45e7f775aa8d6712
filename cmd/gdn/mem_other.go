//go:build !darwin

package main

// darwinMemory is not reached off darwin.
func darwinMemory() (int64, bool) { return 0, false }

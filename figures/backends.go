package figures

import "github.com/gdnback/gdnback/verify"

// Backends are the backends the verification matrix figure covers: every
// one that this build has. Today that is the CPU reference; a Metal backend
// joins where it builds.
func Backends() []verify.Backend {
	return []verify.Backend{verify.CPU{}}
}

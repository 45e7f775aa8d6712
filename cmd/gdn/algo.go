package main

import (
	"flag"
	"fmt"

	"github.com/gdnback/gdnback/gdn"
)

// algoFlags are the -algo and -L flags of verify, grad and bench.
type algoFlags struct {
	algo *string
	L    *int
	all  bool   // -algo all is allowed (verify, bench)
	zero string // what -L 0 means
}

// addAlgoFlags adds -algo and -L to fs; all allows -algo all, and zero
// says what -L 0 means for the command ("" for gdn's default chunk
// length; verify runs each case at its own segment length).
func addAlgoFlags(fs *flag.FlagSet, all bool, zero string) *algoFlags {
	which := "recurrent or chunk"
	if all {
		which = "recurrent, chunk or all (both)"
	}
	if zero == "" {
		zero = fmt.Sprint(gdn.DefaultChunkLen)
	}
	return &algoFlags{
		algo: fs.String("algo", "recurrent", "algorithm: "+which),
		L:    fs.Int("L", 0, fmt.Sprintf("chunk length `n` of -algo chunk (0: %s)", zero)),
		all:  all,
		zero: zero,
	}
}

// algos returns the algorithms the flags select, or a usage error.
func (a *algoFlags) algos() ([]gdn.Algo, error) {
	if *a.L < 0 {
		return nil, fmt.Errorf("-L %d: want 0 (%s) or a positive chunk length", *a.L, a.zero)
	}
	if a.all && *a.algo == "all" {
		return []gdn.Algo{gdn.Recurrent, gdn.Chunk}, nil
	}
	x, err := gdn.ParseAlgo(*a.algo)
	if err != nil {
		if a.all {
			return nil, fmt.Errorf("-algo %q: want recurrent, chunk or all", *a.algo)
		}
		return nil, fmt.Errorf("-algo %q: want recurrent or chunk", *a.algo)
	}
	return []gdn.Algo{x}, nil
}

// algoNote describes a chunk run for a command's header line (" algo=chunk
// L=n"); a recurrent run, the default, adds nothing.
func algoNote(opt gdn.Options, T int) string {
	if opt.Algo != gdn.Chunk {
		return ""
	}
	return fmt.Sprintf(" algo=chunk L=%d", min(opt.ChunkLength(), T))
}

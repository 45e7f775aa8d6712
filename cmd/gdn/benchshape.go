package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
)

// benchShape is the shape gdn bench measures: head size, q/k heads, value
// heads and tokens per sequence.
type benchShape struct{ S, Hk, Hv, T int }

// The shapes gdn bench's flags default to: the 27B model's (Qwen3.5 27B's
// linear-attention layers: 16 q/k heads, 48 value heads of 128, at its
// 8192-token training length) when every backend measured is a GPU, and a
// small one that the CPU and the Metal executor finish in seconds.
var (
	benchShapeGPU   = benchShape{S: 128, Hk: 16, Hv: 48, T: 8192}
	benchShapeSmall = benchShape{S: 128, Hk: 1, Hv: 2, T: 1024}
)

// resolveBenchShape fills the fields of given whose flag (S, hk, hv, T) is
// not in set with the GPU defaults when gpu is true, the small ones
// otherwise. It returns the shape and a line naming the defaults taken
// ("" when every flag was given). given is not modified.
func resolveBenchShape(given benchShape, set map[string]bool, gpu bool) (benchShape, string) {
	def, why := benchShapeSmall, "not every backend is a GPU"
	if gpu {
		def, why = benchShapeGPU, "the 27B model's shape on a GPU"
	}
	out := given
	var taken []string
	for _, f := range []struct {
		name string
		dst  *int
		def  int
	}{{"S", &out.S, def.S}, {"hk", &out.Hk, def.Hk}, {"hv", &out.Hv, def.Hv}, {"T", &out.T, def.T}} {
		if set[f.name] {
			continue
		}
		*f.dst = f.def
		taken = append(taken, fmt.Sprintf("-%s %d", f.name, f.def))
	}
	if len(taken) == 0 {
		return out, ""
	}
	return out, fmt.Sprintf("defaults (%s): %s", why, strings.Join(taken, " "))
}

// allGPU reports whether every backend of bs is a GPU: the Metal backend
// on a Mac's GPU or on an NVIDIA GPU through metal:cuda (not the CPU, not
// the Metal executor). It is false for no backends.
func allGPU(bs []gdn.Backend) bool {
	for _, b := range bs {
		k, ok := b.(interface{ Kind() string })
		if !ok || (k.Kind() != metal.GPU && k.Kind() != metal.CUDA) {
			return false
		}
	}
	return len(bs) > 0
}

// benchRecord is one measurement of gdn bench as -json writes it, one
// object per line.
type benchRecord struct {
	Backend string `json:"backend"` // the backend's name
	Algo    string `json:"algo"`    // recurrent or chunk
	// Pass: forward; backward (the checkpointed one, segment length C,
	// for recurrent; the chunk kernels' for chunk); backward_keep_all.
	Pass string `json:"pass"`
	S    int    `json:"S"`
	Hk   int    `json:"hk"`
	Hv   int    `json:"hv"`
	T    int    `json:"T"`
	Seqs int    `json:"seqs"`
	Gate string `json:"gate"` // scalar or kda
	C    int    `json:"C,omitempty"`
	L    int    `json:"L,omitempty"`
	// MS: the pass's time in milliseconds: on metal:cuda the median GPU
	// time by CUDA events (Stat "median"), elsewhere the best wall time
	// of Runs (Stat "best").
	MS   float64 `json:"ms,omitempty"`
	Stat string  `json:"stat,omitempty"`
	Runs int     `json:"runs,omitempty"`
	// metal:cuda only: the host's launch time, the whole call, and the
	// device memory the backend held (its buffers, grown and kept).
	LaunchMS  float64 `json:"launch_ms,omitempty"`
	CallMS    float64 `json:"call_ms,omitempty"`
	PeakBytes int64   `json:"peak_bytes,omitempty"`
	// ScratchBytes: the backward's scratch per (head, seq); ScratchPairs:
	// the pairs whose scratch a call holds at once (fewer than hv*seqs
	// where the backend runs the value heads in groups).
	ScratchBytes int     `json:"scratch_bytes,omitempty"`
	ScratchPairs int     `json:"scratch_pairs,omitempty"`
	FlopsToken   float64 `json:"flops_per_token_head,omitempty"`
	Note         string  `json:"note,omitempty"` // why a pass did not run
}

// benchJSON writes benchRecords to w, one per line; a nil w writes nothing.
type benchJSON struct {
	w    io.Writer
	base benchRecord // the shape fields every record carries
	err  error
}

// emit writes r with the shape fields of j.base filled in. The first
// write error is kept in j.err and stops later writes.
func (j *benchJSON) emit(r benchRecord) {
	if j == nil || j.w == nil || j.err != nil {
		return
	}
	r.S, r.Hk, r.Hv, r.T, r.Seqs, r.Gate = j.base.S, j.base.Hk, j.base.Hv, j.base.T, j.base.Seqs, j.base.Gate
	b, err := json.Marshal(r)
	if err == nil {
		_, err = j.w.Write(append(b, '\n'))
	}
	j.err = err
}

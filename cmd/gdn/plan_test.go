package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
)

// The upstream review's figures at the 27B shape: (n_ck + C + 3) * S_v^2 * 4
// bytes per (head, seq) at S_v 128, T 8192, C 91 (n_ck 91) is 185 states,
// 11.5625 MiB; 48 heads make 555 MiB per op.
func TestUpstreamScratch(t *testing.T) {
	if got, want := upstreamScratch(128, 128, 8192, 91), 185*128*128*4; got != want {
		t.Fatalf("upstreamScratch = %d, want %d", got, want)
	}
	if got := upstreamScratch(128, 128, 8192, 91) * 48; got != 555<<20 {
		t.Fatalf("per op %d, want 555 MiB", got)
	}
}

func TestPlan27B(t *testing.T) {
	for _, args := range [][]string{
		{"plan", "-S", "128", "-hk", "16", "-hv", "48", "-T", "8192"},
		{"plan"}, // the defaults are the 27B
	} {
		st, out, errOut := runGdn(args...)
		if st != 0 {
			t.Fatalf("%v: status %d\n%s", args, st, errOut)
		}
		for _, want := range []string{
			"S_k 128, S_v 128, H_k 16, H_v 48, T 8192, n_seqs 1; 48 delta-net layers",
			"segment length C 91 (ceil(sqrt(T))), n_ck 91 checkpoints",
			"upstream: inside each op's output                11.56 MiB  555.0 MiB    26.02 GiB",
			"1.084 GiB  two layers' outputs overlapped",
			"shared: this project (gdn.ScratchBytes)          11.44 MiB  549.2 MiB    549.2 MiB",
			"91 *", "8192 (keep all)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
	}
}

func TestPlanSegment(t *testing.T) {
	st, out, _ := runGdn("plan", "-S", "64", "-hk", "2", "-hv", "4", "-T", "100", "-C", "7", "-layers", "1", "-seqs", "2")
	if st != 0 {
		t.Fatal(st)
	}
	// n_ck = 15; upstream (15 + 7 + 3) * 64*64*4 = 400 KiB per (head, seq), 8 pairs.
	for _, want := range []string{"segment length C 7 (-C), n_ck 15", " 400.0 KiB  3.125 MiB    3.125 MiB", "100 (keep all)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "overlapped") {
		t.Errorf("one layer cannot overlap two:\n%s", out)
	}
}

// ggufKV is one metadata entry of a hand-written GGUF file.
type ggufKV struct {
	key string
	val any // uint32, uint64, float32 or string
}

// ggufBytes is a metadata-only GGUF v3 file: header, key-value pairs, no
// tensors, padded to the default alignment of 32.
func ggufBytes(kvs []ggufKV) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	put := func(v any) { binary.Write(&b, le, v) }
	str := func(s string) { put(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	put(uint32(3))        // version
	put(uint64(0))        // tensor count
	put(uint64(len(kvs))) // metadata kv count
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.val.(type) {
		case uint32:
			put(uint32(4))
			put(v)
		case float32:
			put(uint32(6))
			put(v)
		case string:
			put(uint32(8))
			str(v)
		case uint64:
			put(uint32(10))
			put(v)
		default:
			panic(fmt.Sprintf("ggufBytes: %T", v))
		}
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

// writeGGUF writes ggufBytes(kvs) to a new file and returns its path.
func writeGGUF(t *testing.T, kvs []ggufKV) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(path, ggufBytes(kvs), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func hybrid(arch, name string, blocks, hv, interval uint32) []ggufKV {
	return []ggufKV{
		{"general.architecture", arch},
		{"general.name", name},
		{arch + ".block_count", blocks},
		{arch + ".context_length", uint32(262144)},
		{arch + ".full_attention_interval", interval},
		{arch + ".ssm.conv_kernel", uint32(4)},
		{arch + ".ssm.state_size", uint32(128)},
		{arch + ".ssm.group_count", uint32(16)},
		{arch + ".ssm.time_step_rank", hv},
		{arch + ".ssm.inner_size", uint32(128) * hv},
		{arch + ".rope.freq_base", float32(1e7)},
	}
}

func TestPlanGGUF(t *testing.T) {
	tests := []struct {
		name string
		kvs  []ggufKV
		want []string
	}{
		{"Qwen3.5-27B", hybrid("qwen35", "Qwen3.5 27B", 64, 48, 4), []string{
			"(qwen35 Qwen3.5 27B: 64 blocks, full attention every 4th layer, so 48 delta-net layers)",
			"S_k 128, S_v 128, H_k 16, H_v 48, T 8192, n_seqs 1; 48 delta-net layers",
			"11.56 MiB  555.0 MiB    26.02 GiB",
		}},
		{"Qwen3-Next-80B-A3B", hybrid("qwen3next", "Qwen3 Next 80B A3B Instruct", 48, 32, 4), []string{
			"48 blocks, full attention every 4th layer, so 36 delta-net layers",
			"H_k 16, H_v 32, T 8192",
			"11.56 MiB  370.0 MiB    13.01 GiB",
		}},
		{"no interval", func() []ggufKV {
			kvs := hybrid("qwen3next", "x", 4, 32, 4)
			return append(kvs[:4], kvs[5:]...)
		}(), []string{"no full_attention_interval: every block counted as delta-net, so 4 delta-net layers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeGGUF(t, tt.kvs)
			st, out, errOut := runGdn("plan", "-gguf", path)
			if st != 0 {
				t.Fatalf("status %d\n%s", st, errOut)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestPlanGGUFErrors(t *testing.T) {
	llama := writeGGUF(t, []ggufKV{{"general.architecture", "llama"}, {"llama.block_count", uint32(32)}})
	st, _, errOut := runGdn("plan", "-gguf", llama)
	if st != 1 || !strings.Contains(errOut, "llama.ssm.state_size is missing (architecture \"llama\": not a Gated DeltaNet model?)") {
		t.Errorf("llama: status %d, %q", st, errOut)
	}
	bad := hybrid("qwen35", "x", 64, 48, 4)
	bad[8].val = "forty-eight"
	st, _, errOut = runGdn("plan", "-gguf", writeGGUF(t, bad))
	if st != 1 || !strings.Contains(errOut, "qwen35.ssm.time_step_rank is a String, want a number") {
		t.Errorf("string value: status %d, %q", st, errOut)
	}
	notGGUF := filepath.Join(t.TempDir(), "x.gguf")
	os.WriteFile(notGGUF, []byte("not a gguf file at all, just text......"), 0o644)
	if st, _, errOut = runGdn("plan", "-gguf", notGGUF); st != 1 || !strings.Contains(errOut, notGGUF) {
		t.Errorf("not GGUF: status %d, %q", st, errOut)
	}
	if st, _, errOut = runGdn("plan", "-gguf", llama, "-S", "64", "-layers", "3"); st != 2 || !strings.Contains(errOut, "drop -S, -layers") {
		t.Errorf("-gguf with -S: status %d, %q", st, errOut)
	}
}

func TestPlanMetalChunkScratch(t *testing.T) {
	old, oldPairs := metalChunkScratchBytes, metalChunkScratchPairs
	defer func() { metalChunkScratchBytes, metalChunkScratchPairs = old, oldPairs }()
	metalChunkScratchBytes = func(s gdn.Shape, L int) int { return s.Sk * s.Sv * L }
	metalChunkScratchPairs = func(s gdn.Shape, L int) int { return s.Hv * s.Seqs }
	st, out, _ := runGdn("plan", "-L", "32")
	if st != 0 || !strings.Contains(out, "shared: Metal chunk kernels, L 32                512.0 KiB  24.00 MiB    24.00 MiB  metal.ChunkScratchBytes: a WY area per chunk\n") {
		t.Errorf("status %d\n%s", st, out)
	}
	// Value heads in groups: the op holds one group's pairs.
	metalChunkScratchPairs = func(s gdn.Shape, L int) int { return s.Hv * s.Seqs / 2 }
	st, out, _ = runGdn("plan", "-L", "32")
	if st != 0 || !strings.Contains(out, "shared: Metal chunk kernels, L 32                512.0 KiB  12.00 MiB    12.00 MiB  metal.ChunkScratchBytes: a WY area per chunk; value heads in groups, 24 (head, seq) pairs' at once") {
		t.Errorf("groups of value heads: status %d\n%s", st, out)
	}
	metalChunkScratchBytes = nil
	if _, out, _ := runGdn("plan"); strings.Contains(out, "shared: Metal chunk kernels") {
		t.Errorf("with no chunk scratch function, the plan still shows the Metal chunk kernels:\n%s", out)
	}
}

func TestPlanMetalChunkKept(t *testing.T) {
	oldBytes, oldSlots := metalChunkKeptBytes, metalMaxKeepSlots
	defer func() { metalChunkKeptBytes, metalMaxKeepSlots = oldBytes, oldSlots }()
	metalChunkKeptBytes = func(s gdn.Shape, L int) int { return s.Hv * s.Seqs * L << 10 }
	metalMaxKeepSlots = func(s gdn.Shape, L int) int { return 7 }
	// per (head, seq) 32 KiB at L 32; 48 of them a layer, 48 layers
	st, out, _ := runGdn("plan", "-L", "32")
	if st != 0 || !strings.Contains(out, "kept: Metal chunk kernels' A, P, X, L 32         32.00 KiB  1.500 MiB    72.00 MiB  metal.ChunkKeptBytes: ForwardKeep's, a layer each (KeepSlots), 7 a Backend (metal.MaxKeepSlots)\n") {
		t.Errorf("status %d\n%s", st, out)
	}
	metalMaxKeepSlots = func(s gdn.Shape, L int) int { return 0 }
	if _, out, _ := runGdn("plan"); strings.Contains(out, "kept:") {
		t.Errorf("with no slot to keep, the plan still shows the kept matrices:\n%s", out)
	}
	metalChunkKeptBytes = nil
	if _, out, _ := runGdn("plan"); strings.Contains(out, "kept:") {
		t.Errorf("with no kept-bytes function, the plan still shows the kept matrices:\n%s", out)
	}
}

func TestPlanMetalScratch(t *testing.T) {
	old := metalScratchBytes
	defer func() { metalScratchBytes = old }()
	metalScratchBytes = func(sk, sv, T, C int) int { return 2 * sk * sv * 4 }
	st, out, _ := runGdn("plan")
	if st != 0 || !strings.Contains(out, "shared: Metal kernels (metal.ScratchBytes)       128.0 KiB  6.000 MiB    6.000 MiB") {
		t.Errorf("status %d\n%s", st, out)
	}
}

// TestPlanHostile: sizes whose figures overflow, from flags (usage errors,
// status 2) or from GGUF metadata (status 1), are refused naming the flag
// or the GGUF key and its value; the child's peak memory stays small.
func TestPlanHostile(t *testing.T) {
	all30 := hybrid("qwen35", "x", 1<<30, 1<<30, 4)
	for i := range all30 {
		if v, ok := all30[i].val.(uint32); ok && v != 4 {
			all30[i].val = uint32(1 << 30)
		}
	}
	interval1 := hybrid("qwen35", "x", 64, 48, 1)
	noInner47 := hybrid("qwen35", "x", 64, 47, 4)
	noInner47 = append(noInner47[:9], noInner47[10:]...)
	badInner := hybrid("qwen35", "x", 64, 48, 4)
	badInner[9].val = uint32(1000)
	tests := []struct {
		name   string
		args   []string
		kvs    []ggufKV
		status int
		want   string
	}{
		{"-T max", []string{"-T", "9223372036854775807"}, nil, 2,
			"gdn plan: S_k 128 (-S), H_k 16 (-hk), T 9223372036854775807 (-T), n_seqs 1 (-seqs): q and k [S_k, H_k, T, n_seqs] would hold more than 2^40 elements, more than the op takes\n"},
		{"-hv max", []string{"-hv", "9223372036854775807", "-hk", "1"}, nil, 2,
			"gdn plan: S_v 128 (-S), H_v 9223372036854775807 (-hv), T 8192 (-T), n_seqs 1 (-seqs): y [S_v, H_v, T, n_seqs] would hold more than 2^40 elements, more than the op takes\n"},
		{"-seqs 2^62", []string{"-seqs", "4611686018427387904"}, nil, 2,
			"gdn plan: S_k 128 (-S), H_k 16 (-hk), T 8192 (-T), n_seqs 4611686018427387904 (-seqs): q and k [S_k, H_k, T, n_seqs] would hold more than 2^40 elements, more than the op takes\n"},
		{"-layers max", []string{"-layers", "9223372036854775807"}, nil, 2,
			"gdn plan: S_k 128 (-S), S_v 128 (-S), H_v 48 (-hv), T 8192 (-T), n_seqs 1 (-seqs), layers 9223372036854775807 (-layers): the whole model's scratch does not fit in 64 bits\n"},
		{"GGUF keys at 2^30", nil, all30, 1,
			"S_k 1073741824 (qwen35.ssm.state_size), H_k 1073741824 (qwen35.ssm.group_count), T 8192 (-T), n_seqs 1 (-seqs): q and k [S_k, H_k, T, n_seqs] would hold more than 2^40 elements, more than the op takes\n"},
		{"full_attention_interval 1", nil, interval1, 1,
			"qwen35.full_attention_interval = 1 makes every one of the qwen35.block_count = 64 blocks full attention: no delta-net layer to plan\n"},
		{"47 value heads, no inner_size", nil, noInner47, 1,
			"qwen35.ssm.time_step_rank = 47 value heads is not a multiple of qwen35.ssm.group_count = 16 q/k heads\n"},
		{"inner_size not a multiple", nil, badInner, 1,
			"qwen35.ssm.inner_size = 1000 is not a multiple of qwen35.ssm.time_step_rank = 48\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"plan"}, tt.args...)
			if tt.kvs != nil {
				args = append(args, "-gguf", writeGGUF(t, tt.kvs))
			}
			r := runChild(t, args...)
			if r.status != tt.status || !strings.HasSuffix(r.stderr, tt.want) || r.stdout != "" {
				t.Errorf("status %d, stdout %q, stderr %q\nwant status %d, stderr ending %q", r.status, r.stdout, r.stderr, tt.status, tt.want)
			}
			if r.maxRSS > 48<<20 {
				t.Errorf("peak memory %s", fmtBytes(r.maxRSS))
			}
		})
	}
}

// TestPlanMetalHeadSize: a head size the kernels do not take gets a note,
// not a 0 B row.
func TestPlanMetalHeadSize(t *testing.T) {
	st, out, _ := runGdn("plan", "-S", "100")
	if st != 0 || !strings.Contains(out, "shared: Metal kernels: none; they do not take S_k 100, S_v 100 (they take head sizes 16, 32, 64, 128, 256)\n") || strings.Contains(out, " 0 B") {
		t.Errorf("status %d\n%s", st, out)
	}
}

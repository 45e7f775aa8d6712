package metal

import (
	"bytes"
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// mslShim declares what gdn.metal uses of MSL's standard library, with
// MSL's signatures and address spaces (see the file's comment).
//
//go:embed testdata/msl/metal_stdlib
var mslShim []byte

// mslModes are the two ways TestMSLClang type-checks gdn.metal: under C++
// for OpenCL, whose address spaces stand for Metal's, and as C++14, the
// language MSL 3 is based on.
var mslModes = []struct {
	name  string
	flags []string
}{
	{"address spaces (C++ for OpenCL)", []string{"-x", "clcpp", "-cl-std=clc++2021", "-cl-no-stdinc"}},
	{"C++14", []string{"-x", "c++", "-std=c++14", "-pedantic-errors"}},
}

// mslHostNameRE is the host_name attribute of a kernel's explicit
// instantiation, which clang does not take there.
var mslHostNameRE = regexp.MustCompile(`\[\[\s*host_name\(\s*"\w+"\s*\)\s*\]\]`)

// clangMSL type-checks src behind the shim with clang in the given mode
// and returns clang's output and error. The kernels' explicit
// instantiations stay, without their host names, so that every kernel
// template is checked as instantiated.
func clangMSL(t *testing.T, clang string, flags []string, src []byte) (string, error) {
	t.Helper()
	files := map[string][]byte{"metal_stdlib": mslShim, "kernel.metal": mslHostNameRE.ReplaceAll(src, nil)}
	return runClang(t, clang, files, "kernel.metal",
		append(append([]string{}, flags...), "-fsyntax-only", "-Wall", "-Werror", "-Wno-unknown-attributes"))
}

// mslGenericRE is a named parameter, variable or field in clang's AST
// dump whose type is in the generic address space: a pointer or reference
// declared without one of Metal's, which C++ for OpenCL takes and MSL
// refuses (for function arguments, its specification says so; the kernels
// hold variables and fields to the same rule). (Implicit members have no
// name and a one-column range.)
var mslGenericRE = regexp.MustCompile(`(?:ParmVarDecl|VarDecl|FieldDecl) 0x[0-9a-f]+ <[^>\n]*,[^>\n]*> col:\d+(?: used| referenced)* (\w+) '([^'\n]*__generic[^'\n]*)'`)

// mslUnqualified returns "name: type" for each pointer or reference of src
// that has no address space, from clang's AST under C++ for OpenCL.
func mslUnqualified(t *testing.T, clang string, src []byte) []string {
	t.Helper()
	out, err := clangMSL(t, clang, append(append([]string{}, mslModes[0].flags...), "-Xclang", "-ast-dump"), src)
	if err != nil {
		t.Fatalf("clang's AST dump of gdn.metal failed: %v\n%s", err, firstLines(out, 6))
	}
	var found []string
	for _, m := range mslGenericRE.FindAllStringSubmatch(out, -1) {
		found = append(found, m[1]+": "+m[2])
	}
	return found
}

// TestMSLClang checks gdn.metal as far as a compiler other than Apple's
// can: with clang ($GDN_CLANG, else clang-16) behind declarations of MSL's
// library (testdata/msl/metal_stdlib), once under C++ for OpenCL, so that
// a pointer into one of Metal's address spaces cannot reach a variable or
// a simdgroup_load of another, and once as C++14 with -pedantic-errors,
// so that the kernels use no later C++. The executor and the CUDA prelude
// treat every address space as plain memory and compile C++17 and 20, so
// neither catches these; each planted error below must fail here and
// compile through the CUDA check. A pointer or reference declared without
// an address space, which MSL refuses as an argument, takes OpenCL's
// generic one here: the test finds those in clang's AST. C++ for OpenCL also refuses, as MSL
// does, virtual functions, new and delete, register, thread_local and
// exceptions; TestMSLLeftOut looks for the rest of what MSL leaves out.
// What neither can see: the rest of Apple's compiler (its limits,
// attributes, and the library's exact overload sets).
//
// Without clang it skips, unless $GDN_REQUIRE_CLANG is set
// (scripts/ci.d/20-clang.sh sets it after installing clang-16).
func TestMSLClang(t *testing.T) {
	clang := requireClang(t)
	for _, m := range mslModes {
		if out, err := clangMSL(t, clang, m.flags, source); err != nil {
			t.Errorf("%s: gdn.metal does not type-check with %s: %v\n%s", m.name, clang, err, out)
		}
	}
	if found := mslUnqualified(t, clang, source); len(found) > 0 {
		t.Errorf("gdn.metal declares pointers or references without an address space:\n%s", strings.Join(found, "\n"))
	}
	// A pointer without an address space compiles under C++ for OpenCL
	// (and through the CUDA check), as the generic address space: only the
	// AST shows it.
	const unq = "static inline gdn_rows gdn_walk_rows(int tid, int nthr, int sk)"
	bad := strings.Replace(string(source), unq, "static inline gdn_rows gdn_walk_rows(int tid, int nthr, int sk, float * unq = nullptr)", 1)
	if bad == string(source) {
		t.Fatalf("the planted parameter's line is not in gdn.metal: %q", unq)
	}
	if found := mslUnqualified(t, clang, []byte(bad)); len(found) != 1 || !strings.HasPrefix(found[0], "unq: ") {
		t.Errorf("a pointer parameter without an address space: found %v, want unq alone", found)
	}
	if out, err := clangCUDA(t, clang, []byte(bad)); err != nil {
		t.Errorf("the planted parameter fails the CUDA check too (err %v):\n%s", err, firstLines(out, 6))
	}
	planted := []struct {
		name, old, new string
		mode           int    // index into mslModes
		want           string // in clang's output
	}{
		{
			name: "device memory as threadgroup memory",
			old:  "threadgroup float * M = shmem;",
			new:  "threadgroup float * M = scr;",
			mode: 0, want: "__local float",
		},
		{
			name: "a tile loaded from constant memory",
			old:  "w.wn, sk, false, M, lm, true, sk, GDN_FULL",
			new:  "w.wn, sk, false, &args.scale, lm, true, sk, GDN_FULL",
			mode: 0, want: "no matching function for call to 'simdgroup_load'",
		},
		{
			name: "a C++17 structured binding",
			old:  "const int2 sp = gdn_chunk_span(args, tgpig.x);",
			new:  "const auto [sp0, sp1] = gdn_chunk_span(args, tgpig.x); const int2 sp = int2(sp0, sp1);",
			mode: 1, want: "C++17",
		},
	}
	for _, p := range planted {
		bad := strings.Replace(string(source), p.old, p.new, 1)
		if bad == string(source) {
			t.Fatalf("%s: the planted error's line is not in gdn.metal: %q", p.name, p.old)
		}
		m := mslModes[p.mode]
		out, err := clangMSL(t, clang, m.flags, []byte(bad))
		if err == nil || !strings.Contains(out, "kernel.metal:") || !strings.Contains(out, p.want) {
			t.Errorf("%s: %s: the planted error passed the check, or failed it for another reason than %q (err %v):\n%s",
				m.name, p.name, p.want, err, firstLines(out, 6))
			continue
		}
		t.Logf("%s: %s fails the check, as it should:\n%s", m.name, p.name, firstLines(out, 2))
		// The CUDA path takes it: only this check stands in its way.
		if out, err := clangCUDA(t, clang, []byte(bad)); err != nil {
			t.Errorf("%s: the CUDA check fails it too, so it shows nothing of this check (err %v):\n%s", p.name, err, firstLines(out, 6))
		}
	}
}

// mslLeftOut are the C++14 constructs MSL leaves out that neither clang
// mode refuses (C++ for OpenCL refuses virtual functions, new and delete,
// register, thread_local and exceptions itself; MSL allows recursion in
// compute kernels from Metal 2.4, so it is not here).
var mslLeftOut = []struct {
	name string
	re   *regexp.Regexp
}{
	// a capture list not after a name, ")" or "]" (which would make it a
	// subscript), or after return
	{"a lambda", regexp.MustCompile(`(?:^|[^\w\s)\]]|\breturn)\s*\[[^\[\]]*\]\s*(?:\(|\{|mutable\b)`)},
	{"goto", regexp.MustCompile(`\bgoto\b`)},
	{"a derived class", regexp.MustCompile(`\b(?:struct|class)\s+\w+\s*(?:final\s*)?:[^:]`)},
	{"noexcept", regexp.MustCompile(`\bnoexcept\b`)},
	{"typeid or dynamic_cast", regexp.MustCompile(`\b(?:typeid|dynamic_cast)\b`)},
}

// mslCodeRE matches what mslLeftOutIn blanks: comments, and the insides
// of string literals (their quotes stay).
var mslCodeRE = regexp.MustCompile(`//[^\n]*|/\*(?s:.*?)\*/|"(?:[^"\\\n]|\\.)*"`)

// mslIncludeRE is an #include and what it names: <header>, or the opening
// quote of a "header".
var mslIncludeRE = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*(<[^>\n]*>|")`)

// mslLeftOutIn returns "line N: construct" for each construct of
// mslLeftOut in src, outside comments and string literals, and each
// header it includes other than <metal_stdlib>.
func mslLeftOutIn(src []byte) []string {
	code := mslCodeRE.ReplaceAllFunc(src, func(m []byte) []byte {
		quoted := m[0] == '"'
		return bytes.Map(func(r rune) rune {
			if r == '\n' || (quoted && r == '"') {
				return r
			}
			return ' '
		}, m)
	})
	var found []string
	line := func(at int) int { return 1 + bytes.Count(code[:at], []byte("\n")) }
	for _, c := range mslLeftOut {
		for _, loc := range c.re.FindAllIndex(code, -1) {
			found = append(found, fmt.Sprintf("line %d: %s", line(loc[0]), c.name))
		}
	}
	for _, m := range mslIncludeRE.FindAllSubmatchIndex(code, -1) {
		if string(code[m[2]:m[3]]) != "<metal_stdlib>" {
			found = append(found, fmt.Sprintf("line %d: a header other than <metal_stdlib>", line(m[0])))
		}
	}
	return found
}

// TestMSLLeftOut: gdn.metal uses none of the C++ that MSL leaves out and
// clang's modes let through, and the scanner finds each such construct and
// none of its look-alikes.
func TestMSLLeftOut(t *testing.T) {
	if found := mslLeftOutIn(source); len(found) > 0 {
		t.Errorf("gdn.metal uses C++ that MSL leaves out:\n%s", strings.Join(found, "\n"))
	}
	for _, c := range []struct {
		src  string
		want string // "" for none
	}{
		{"auto f = [](int a) { return a; };", "a lambda"},
		{"auto f = [&] { x++; };", "a lambda"},
		{"g([=](int i) { return i; });", "a lambda"},
		{"return [](int i) { return i; }(2);", "a lambda"},
		{"y = a[i](2);", ""},
		{"kernel void k(device float * d [[buffer(0)]]) {}", ""},
		{"x = m[r][c]*(a + b);", ""},
		{"goto done;", "goto"},
		{"struct B : A { int x; };", "a derived class"},
		{"class D final : public A {};", "a derived class"},
		{"struct S { unsigned f : 3; };", ""},
		{"x = c ? a : b; y = metal::min(a, b);", ""},
		{"void f() noexcept;", "noexcept"},
		{"auto p = dynamic_cast<B*>(q);", "typeid or dynamic_cast"},
		{"#include <cmath>", "a header other than <metal_stdlib>"},
		{`#include "gdn.h"`, "a header other than <metal_stdlib>"},
		{"#include <metal_stdlib>", ""},
		{"// goto, [](){}, struct B : A\n/* noexcept */ s = \"goto\";", ""},
	} {
		found := mslLeftOutIn([]byte(c.src))
		switch {
		case c.want == "" && len(found) > 0:
			t.Errorf("%q: found %v, want nothing", c.src, found)
		case c.want != "" && (len(found) != 1 || !strings.HasSuffix(found[0], ": "+c.want)):
			t.Errorf("%q: found %v, want one %s", c.src, found, c.want)
		}
	}
}

package metal

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// mslField is one 4-byte scalar of a struct of gdn.metal, flattened: its
// path (e.g. "q.nb[2]"), its offset in bytes and whether it is a float.
type mslField struct {
	path  string
	off   int
	float bool
}

// mslStruct flattens struct name of gdn.metal into its 4-byte scalars, in
// declaration order, expanding fields of the struct types in nested.
func mslStruct(t *testing.T, src, name string, nested map[string][]mslField) []mslField {
	t.Helper()
	m := regexp.MustCompile(`(?s)struct ` + name + ` \{(.*?)\n\};`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("gdn.metal: no struct %s", name)
	}
	decl := regexp.MustCompile(`^(\w+)\s+(.+?);`)
	var out []mslField
	off := 0
	for _, line := range strings.Split(m[1], "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		d := decl.FindStringSubmatch(line)
		if d == nil {
			continue
		}
		typ := d[1]
		for _, f := range strings.Split(d[2], ",") {
			f = strings.TrimSpace(f)
			n := 1
			if am := regexp.MustCompile(`^(\w+)\[(\d+)\]$`).FindStringSubmatch(f); am != nil {
				f = am[1]
				n = int(am[2][0] - '0')
			}
			for k := 0; k < n; k++ {
				path := f
				if n > 1 {
					path += "[" + string(rune('0'+k)) + "]"
				}
				switch typ {
				case "int", "float":
					out = append(out, mslField{path: path, off: off, float: typ == "float"})
					off += 4
				default:
					sub, ok := nested[typ]
					if !ok {
						t.Fatalf("gdn.metal: %s.%s: type %s is neither int, float nor a known struct", name, f, typ)
					}
					for _, x := range sub {
						out = append(out, mslField{path: path + "." + x.path, off: off + x.off, float: x.float})
					}
					off += 4 * len(sub)
				}
			}
		}
	}
	return out
}

// goFields flattens a Go struct of int32 and float32 fields (and arrays and
// structs of them) the same way, naming fields as gdn.metal does: lower
// case, without underscores.
func goFields(typ reflect.Type, prefix string, base uintptr) []mslField {
	var out []mslField
	for i := range typ.NumField() {
		f := typ.Field(i)
		path := prefix + strings.ToLower(f.Name)
		switch f.Type.Kind() {
		case reflect.Struct:
			out = append(out, goFields(f.Type, path+".", base+f.Offset)...)
		case reflect.Array:
			for k := range f.Type.Len() {
				out = append(out, mslField{path: path + "[" + string(rune('0'+k)) + "]", off: int(base + f.Offset + uintptr(4*k)), float: f.Type.Elem().Kind() == reflect.Float32})
			}
		default:
			out = append(out, mslField{path: path, off: int(base + f.Offset), float: f.Type.Kind() == reflect.Float32})
		}
	}
	return out
}

// TestArgsMirror: kargs mirrors gdn_args, and chunkArgs gdn_chunk_args,
// field by field: the same fields in the same order at the same offsets
// with the same types, and nothing more. The executor checks only the
// total size at each launch.
func TestArgsMirror(t *testing.T) {
	src := string(source)
	views := mslStruct(t, src, "gdn_view", nil)
	for _, m := range []struct {
		msl string
		typ reflect.Type
	}{{"gdn_args", reflect.TypeFor[kargs]()}, {"gdn_chunk_args", reflect.TypeFor[chunkArgs]()}} {
		msl := mslStruct(t, src, m.msl, map[string][]mslField{"gdn_view": views})
		got := goFields(m.typ, "", 0)
		norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
		if len(got) != len(msl) {
			t.Errorf("%s has %d scalars, %s %d", m.typ.Name(), len(got), m.msl, len(msl))
		}
		for i := range min(len(got), len(msl)) {
			g, x := got[i], msl[i]
			if g.path != norm(x.path) || g.off != x.off || g.float != x.float {
				t.Errorf("scalar %d: %s %s at %d (float %v), %s %s at %d (float %v)", i, m.typ.Name(), g.path, g.off, g.float, m.msl, x.path, x.off, x.float)
			}
		}
		if size, want := int(m.typ.Size()), 4*len(msl); size != want || size > argsStride {
			t.Errorf("size of %s %d, sizeof(%s) %d, args stride %d", m.typ.Name(), size, m.msl, want, argsStride)
		}
	}
	if want := 4 * len(mslStruct(t, src, "gdn_args", map[string][]mslField{"gdn_view": views})); argsSize != want {
		t.Errorf("binary size of kargs %d, sizeof(gdn_args) %d", argsSize, want)
	}
}

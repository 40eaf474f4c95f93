package structs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	iofs "io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/shoenig/test/must"
)

// The plain types have the fields and tags of the generated ones and none
// of their methods, so the codec takes its reflection path for them.
type (
	plainVolume         CSIVolume
	plainClaim          CSIVolumeClaim
	plainRegister       CSIVolumeRegisterRequest
	plainRegisterResp   CSIVolumeRegisterResponse
	plainClaimReq       CSIVolumeClaimRequest
	plainClaimResp      CSIVolumeClaimResponse
	plainEntryBatch     EntryBatchRequest
	plainSealed         Sealed
	plainCapability     CSIVolumeCapability
	plainMountOptions   CSIMountOptions
	plainTopology       CSITopology
	plainTopologyReq    CSITopologyRequest
	plainSecrets        CSISecrets
	generatedAndPlainOf struct {
		generated any
		plain     func(any) any
	}
)

// TestGeneratedCodecs_SameWireAsReflection encodes each generated type,
// every field set, and the same value through the reflection path: both
// must carry the same fields and values, and each decodes the other's
// bytes to the value.
// It also checks that every type codecgen.go lists has generated methods.
func TestGeneratedCodecs_SameWireAsReflection(t *testing.T) {
	cases := map[string]generatedAndPlainOf{
		"CSIVolume":                 {new(CSIVolume), func(v any) any { return (*plainVolume)(v.(*CSIVolume)) }},
		"CSIVolumeClaim":            {new(CSIVolumeClaim), func(v any) any { return (*plainClaim)(v.(*CSIVolumeClaim)) }},
		"CSIVolumeRegisterRequest":  {new(CSIVolumeRegisterRequest), func(v any) any { return (*plainRegister)(v.(*CSIVolumeRegisterRequest)) }},
		"CSIVolumeRegisterResponse": {new(CSIVolumeRegisterResponse), func(v any) any { return (*plainRegisterResp)(v.(*CSIVolumeRegisterResponse)) }},
		"CSIVolumeClaimRequest":     {new(CSIVolumeClaimRequest), func(v any) any { return (*plainClaimReq)(v.(*CSIVolumeClaimRequest)) }},
		"CSIVolumeClaimResponse":    {new(CSIVolumeClaimResponse), func(v any) any { return (*plainClaimResp)(v.(*CSIVolumeClaimResponse)) }},
		"EntryBatchRequest":         {new(EntryBatchRequest), func(v any) any { return (*plainEntryBatch)(v.(*EntryBatchRequest)) }},
		"Sealed":                    {new(Sealed), func(v any) any { return (*plainSealed)(v.(*Sealed)) }},
		"CSIVolumeCapability":       {new(CSIVolumeCapability), func(v any) any { return (*plainCapability)(v.(*CSIVolumeCapability)) }},
		"CSIMountOptions":           {new(CSIMountOptions), func(v any) any { return (*plainMountOptions)(v.(*CSIMountOptions)) }},
		"CSITopology":               {new(CSITopology), func(v any) any { return (*plainTopology)(v.(*CSITopology)) }},
		"CSITopologyRequest":        {new(CSITopologyRequest), func(v any) any { return (*plainTopologyReq)(v.(*CSITopologyRequest)) }},
		"CSISecrets":                {new(CSISecrets), func(v any) any { return (*plainSecrets)(v.(*CSISecrets)) }},
	}
	must.Eq(t, generatedTypes(t), sortedKeys(cases), must.Sprint("every generated type is checked here"))

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ok := tc.generated.(codec.Selfer)
			must.True(t, ok, must.Sprintf("%s has no generated methods: run go generate ./structs", name))

			fill(reflect.ValueOf(tc.generated).Elem(), 0)
			gen, err := Encode(0, tc.generated)
			must.NoError(t, err)
			plain, err := Encode(0, tc.plain(tc.generated))
			must.NoError(t, err)
			// The same fields and values; the generated code writes them in
			// the order of the source, reflection by name, and a decoder
			// takes either.
			must.Eq(t, asMap(t, plain), asMap(t, gen), must.Sprint("generated and reflection encodings differ"))
			must.Eq(t, len(plain), len(gen))

			fromPlain := reflect.New(reflect.TypeOf(tc.generated).Elem()).Interface()
			must.NoError(t, Decode(plain[1:], fromPlain))
			must.Eq(t, tc.generated, fromPlain)
			fromGen := reflect.New(reflect.TypeOf(tc.generated).Elem()).Interface()
			must.NoError(t, Decode(gen[1:], tc.plain(fromGen)))
			must.Eq(t, tc.generated, fromGen)
		})
	}
}

// asMap decodes an encoded struct (after its type byte) into a generic map.
func asMap(t *testing.T, buf []byte) map[string]any {
	t.Helper()
	var m map[string]any
	must.NoError(t, Decode(buf[1:], &m))
	return m
}

// fill sets every exported field reachable from v to a value that is not
// empty: each map and slice gets one element, so the encoding has one
// order.
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(1700000000, 5).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Map:
		m := reflect.MakeMapWithSize(v.Type(), 1)
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", depth))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(3 + depth))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(3 + depth))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}

// generatedTypes returns the types codec_generated.go has methods for.
func generatedTypes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "codec_generated.go", nil, 0)
	must.NoError(t, err)
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || fn.Name.Name != "CodecEncodeSelf" {
			continue
		}
		names = append(names, typeName(fn.Recv.List[0].Type))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestGeneratedCodecs_NotPromoted fails when a struct anywhere in the
// module embeds a type with generated methods: the methods would be
// promoted, and the codec would encode the outer value as the embedded one
// alone, dropping every other field.
func TestGeneratedCodecs_NotPromoted(t *testing.T) {
	generated := generatedTypes(t)
	// Types that embed a generated one only for encoding/json's flattening
	// and are never on the msgpack wire: the promoted methods are unused.
	jsonOnly := map[string]string{
		"server/httpapi.VolumeView": "the HTTP API's JSON of one volume",
		"spec.jsonVolume":           "a JSON volume spec as an operator writes it",
	}
	seen := map[string]bool{}
	var found []string
	files := 0
	err := filepath.WalkDir("..", func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "codec_generated.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		files++
		inStructs := filepath.Base(filepath.Dir(path)) == "structs" && f.Name.Name == "structs"
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			if !ok || (inStructs && slices.Contains(generated, spec.Name.Name)) {
				return true // a generated type flattens what it embeds
			}
			for _, field := range st.Fields.List {
				if len(field.Names) > 0 {
					continue
				}
				name := typeName(field.Type)
				if sel, ok := strings.CutPrefix(name, "structs."); ok {
					name = sel
				} else if !inStructs {
					continue
				}
				if !slices.Contains(generated, name) {
					continue
				}
				key := filepath.ToSlash(filepath.Dir(path))[len("../"):] + "." + spec.Name.Name
				if _, ok := jsonOnly[key]; ok {
					seen[key] = true
					continue
				}
				found = append(found, fmt.Sprintf("%s: %s embeds %s", path, spec.Name.Name, name))
			}
			return true
		})
		return nil
	})
	must.NoError(t, err)
	must.Positive(t, files, must.Sprint("the walk read no Go file"))
	must.MapLen(t, len(jsonOnly), seen, must.Sprint("a JSON-only exception names a type that no longer embeds one"))
	must.SliceEmpty(t, found, must.Sprintf("embedding a type with generated codec methods promotes them: %v", found))
}

// typeName is the name of a type expression without its pointer:
// "CSIVolume" or "structs.CSIVolume".
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return typeName(x.X) + "." + x.Sel.Name
	}
	return ""
}

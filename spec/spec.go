// Package spec reads volume specifications, the files an operator passes to
// `volplane volume register`: Nomad's HCL format, or JSON with the field
// names of structs.CSIVolume.
//
// Parsing checks the shape of the file (known fields, value types, an id,
// type "csi"); whether the volume makes sense is the server's call
// (structs.CSIVolume.Validate), so the rules live in one place.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/volplane/volplane/structs"
)

// ParseVolume parses one volume specification. filename is used in error
// messages only. Content whose first non-blank character is '{' is JSON;
// anything else is HCL.
func ParseVolume(filename string, src []byte) (*structs.CSIVolume, error) {
	if filename == "" {
		filename = "<input>"
	}
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(src, []byte("\xef\xbb\xbf")))
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s: volume specification is empty", filename)
	}
	if trimmed[0] == '{' {
		return parseJSON(filename, src)
	}
	return parseHCL(filename, src)
}

// jsonVolume accepts a volume object with structs.CSIVolume's field names,
// plus an optional Type, which must be "csi" as in the HCL format.
type jsonVolume struct {
	Type string
	structs.CSIVolume
}

// parseJSON decodes a bare volume object, or {"Volumes":[...]} holding
// exactly one, the body of the register endpoint. Unknown fields are errors,
// so that a misspelt field is not silently dropped.
func parseJSON(filename string, src []byte) (*structs.CSIVolume, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(src, &probe); err != nil {
		return nil, jsonError(filename, src, err)
	}
	if len(probe) == 0 {
		return nil, fmt.Errorf("%s: volume specification is empty", filename)
	}
	if raw, ok := probe["Volumes"]; ok && len(probe) == 1 {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("%s: Volumes must be a list of volume objects", filename)
		}
		if len(list) != 1 {
			return nil, fmt.Errorf("%s: Volumes must hold exactly one volume, not %d", filename, len(list))
		}
		// Offsets in errors are relative to the inner object from here on;
		// shift them so that line numbers still match the file.
		offset := max(bytes.Index(src, list[0]), 0)
		return decodeJSONVolume(filename, list[0], src, offset)
	}
	return decodeJSONVolume(filename, src, src, 0)
}

func decodeJSONVolume(filename string, obj, file []byte, offset int) (*structs.CSIVolume, error) {
	var jv jsonVolume
	if err := decodeStrict(filename, obj, file, offset, "volume", &jv); err != nil {
		return nil, err
	}
	if jv.Type != "" && jv.Type != structs.VolumeTypeCSI {
		return nil, fmt.Errorf("%s: unsupported volume type %q: the only type is %q", filename, jv.Type, structs.VolumeTypeCSI)
	}
	if jv.ID == "" {
		return nil, fmt.Errorf("%s: missing volume ID", filename)
	}
	vol := jv.CSIVolume
	return &vol, nil
}

// decodeStrict decodes obj, the part of file that starts at offset, into
// v. An unknown field is an error, so that a misspelt field is not silently
// dropped, and so is anything after the object; what names the object in
// that message.
func decodeStrict(filename string, obj, file []byte, offset int, what string, v any) error {
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErrorAt(filename, file, offset, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: unexpected content after the %s object", filename, what)
	}
	return nil
}

func jsonError(filename string, src []byte, err error) error {
	return jsonErrorAt(filename, src, 0, err)
}

// jsonErrorAt turns encoding/json's errors into "file:line:col: message",
// without the "json: " prefix and Go type names where that is possible.
func jsonErrorAt(filename string, src []byte, base int, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%s:%s: invalid JSON: %s", filename, position(src, base+int(syn.Offset)-1), syn.Error())
	case errors.As(err, &typ):
		field := strings.TrimPrefix(typ.Field, "CSIVolume.")
		if field == "" {
			field = "volume"
		}
		return fmt.Errorf("%s:%s: %s: expected %s, got a JSON %s", filename,
			position(src, base+int(typ.Offset)-1), field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: invalid JSON: unexpected end of input", filename)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	// encoding/json gives no offset for an unknown field; find the key in
	// the source so the message still has a line.
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		if i := bytes.Index(src[base:], []byte(name)); i >= 0 {
			return fmt.Errorf("%s:%s: unknown field %s", filename, position(src, base+i), name)
		}
	}
	return fmt.Errorf("%s: %s", filename, msg)
}

// jsonKind names a Go kind the way a JSON author thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "a list"
	case "map", "struct", "ptr":
		return "an object"
	}
	if strings.HasPrefix(kind, "int") || strings.HasPrefix(kind, "uint") || strings.HasPrefix(kind, "float") {
		return "a number"
	}
	return kind
}

// position gives the "line:column" (both from 1) of the byte at offset off.
func position(src []byte, off int) string {
	if off > len(src) {
		off = len(src)
	}
	if off < 0 {
		off = 0
	}
	line := 1 + bytes.Count(src[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(src[:off], '\n')
	return fmt.Sprintf("%d:%d", line, col)
}

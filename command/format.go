package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/template"

	"github.com/Masterminds/sprig/v3"

	"github.com/volplane/volplane/structs"
)

// outputFormat is what -json and -t ask of a command's output: the object
// as indented JSON, or a Go template run over it, as Nomad's -json and -t.
type outputFormat struct {
	json bool
	tmpl string
}

// FormatFlags adds -json and -t to f; Parse refuses the two together and a
// template that does not parse.
func (m *Meta) FormatFlags(f *flag.FlagSet) *outputFormat {
	m.format = &outputFormat{}
	f.BoolVar(&m.format.json, "json", false, "")
	f.StringVar(&m.format.tmpl, "t", "", "")
	return m.format
}

// set reports whether the output is JSON or a template rather than the
// command's own text.
func (o *outputFormat) set() bool { return o.json || o.tmpl != "" }

func (o *outputFormat) check() error {
	if o.json && o.tmpl != "" {
		return errors.New("Both json and template formatting are not allowed")
	}
	if o.tmpl != "" {
		if _, err := o.template(); err != nil {
			return fmt.Errorf("Error parsing the template given with -t: %w", err)
		}
	}
	return nil
}

func (o *outputFormat) template() (*template.Template, error) {
	return template.New("-t").Funcs(templateFuncs()).Parse(o.tmpl)
}

// templateFuncs are the functions a template may call: Sprig's, named
// "sprig_<name>" as in Nomad's and consul-template's templates.
func templateFuncs() template.FuncMap {
	fm := template.FuncMap{}
	for name, fn := range sprig.TxtFuncMap() {
		fm["sprig_"+name] = fn
	}
	return fm
}

// Output prints v as -json or -t ask (see FormatFlags) and returns the exit
// code. The template runs over v as the API answers it: v encoded to JSON
// and decoded again, so its fields are the API's JSON names (Nomad's) and
// what the JSON leaves out (secrets) cannot be reached from a template.
func (m *Meta) Output(o *outputFormat, v any) int {
	if o.json {
		return m.OutputJSON(v)
	}
	data, err := apiObject(v)
	if err != nil {
		return m.Fail("formatting the data", err)
	}
	t, err := o.template()
	if err != nil {
		return m.Fail("formatting the data", err)
	}
	var out bytes.Buffer
	if err := t.Execute(&out, data); err != nil {
		return m.Fail("formatting the data", err)
	}
	m.Ui.Output(out.String())
	return 0
}

// apiObject is v as a client of the HTTP API decodes it: maps, slices,
// strings, bools and json.Numbers (integers print as integers).
func apiObject(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// TypeFlag adds -type to f, as Nomad's volume and plugin commands take it;
// csi is the only type volplane has, and Parse refuses any other.
func (m *Meta) TypeFlag(f *flag.FlagSet) {
	m.volType = new(string)
	f.StringVar(m.volType, "type", structs.VolumeTypeCSI, "")
}

func checkVolumeType(typ string) error {
	if typ != structs.VolumeTypeCSI {
		return fmt.Errorf("-type %q: volplane has CSI volumes and plugins only (-type csi)", typ)
	}
	return nil
}

// formatOptionsHelp documents -json and -t in the help of the commands that
// take them.
const formatOptionsHelp = `
  -json
    Print the answer as JSON, as the HTTP API gives it.

  -t=<template>
    Print the answer through a Go template (text/template), run over the
    object as the HTTP API gives it, so fields are named as in the JSON:
    -t '{{.ID}}', -t '{{range .}}{{.ID}}{{"\n"}}{{end}}'. Sprig's functions
    are there as sprig_<name>.`

// templateOptionHelp documents -t under a command's own -json.
const templateOptionHelp = `

  -t=<template>
    Print it through a Go template (text/template) run over the object as
    the HTTP API gives it, fields named as in the JSON: -t '{{.ID}}'.
    Sprig's functions are there as sprig_<name>.`

// typeOptionHelp documents -type.
const typeOptionHelp = `
  -type=csi
    The type of volumes or plugins: csi, the only one volplane has.`

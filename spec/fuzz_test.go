package spec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// specSeeds are the specifications of the examples and the tests, in both
// formats.
func specSeeds(f *testing.F, prefix string, extra ...string) {
	files, err := filepath.Glob(filepath.Join("..", "examples", prefix+"*"))
	must.NoError(f, err)
	must.SliceNotEmpty(f, files)
	for _, name := range files {
		src, err := os.ReadFile(name)
		must.NoError(f, err)
		f.Add(src)
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

// FuzzParseVolume parses arbitrary volume specifications: the parser never
// panics, a volume it accepts has an ID, the server's validation of it does
// not panic either, and it reads back the same from its own JSON form (the
// HCL and JSON readers agree).
func FuzzParseVolume(f *testing.F) {
	specSeeds(f, "volume", fullHCL, `{"ID":"v","PluginID":"p","Type":"csi"}`,
		`{"Volumes":[{"ID":"v","RequestedCapabilities":[null]}]}`, "id = \"v\"\ncapability {}\n", "\xef\xbb\xbf{}")
	f.Fuzz(func(t *testing.T, src []byte) {
		vol, err := ParseVolume("fuzz.hcl", src)
		if err != nil {
			must.Nil(t, vol)
			return
		}
		must.NotNil(t, vol)
		must.NotEq(t, "", vol.ID)
		_ = vol.Copy().Validate()
		b, err := json.Marshal(vol)
		must.NoError(t, err)
		back, err := ParseVolume("fuzz.json", b)
		must.NoError(t, err, must.Sprintf("the JSON form of an accepted volume: %s", b))
		must.Eq(t, vol, back)
	})
}

// FuzzParseJob does the same for job specifications, and checks that a
// parsed job goes through the server's defaults and validation without a
// panic.
func FuzzParseJob(f *testing.F) {
	specSeeds(f, "job", fullJobHCL, `{"Job":{"ID":"j","TaskGroups":[null]}}`, `{"ID":"j","TaskGroups":[{"Tasks":[null]}]}`,
		"job \"j\" {\n group \"g\" {\n  count = 0\n }\n}\n")
	specSeeds(f, "plugin-")
	f.Fuzz(func(t *testing.T, src []byte) {
		job, err := ParseJob("fuzz.hcl", src)
		if err != nil {
			must.Nil(t, job)
			return
		}
		must.NotNil(t, job)
		c := job.Copy()
		c.Canonicalize()
		_ = c.Validate()
		b, err := json.Marshal(job)
		must.NoError(t, err)
		back, err := ParseJob("fuzz.json", b)
		must.NoError(t, err, must.Sprintf("the JSON form of an accepted job: %s", b))
		must.Eq(t, job, back)
	})
}

package state

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestUsageRegistry_PersistsAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	u, err := OpenUsageRegistry(dir)
	must.NoError(t, err)
	must.SliceEmpty(t, u.All())

	paths := NewCSIPaths(dir)
	mode := UsageMode(structs.CSIVolumeAccessModeMultiNodeReader, structs.CSIVolumeAttachmentModeFilesystem, true)
	staging := paths.StagingPath("dev", "default", "vol1", mode)
	for _, alloc := range []string{"a2", "a1"} {
		must.NoError(t, u.Add(VolumeUsage{
			AllocID: alloc, PluginID: "dev", VolumeID: "vol1", ExternalID: "ext-vol1",
			StagingPath: staging, TargetPath: paths.TargetPath(alloc, "vol1"),
		}))
	}
	must.Error(t, u.Add(VolumeUsage{AllocID: "a3"}), must.Sprint("a record needs its keys"))

	must.Eq(t, []string{"a2"}, u.OthersStagedAt("a1", "dev", staging))
	must.SliceEmpty(t, u.OthersStagedAt("a1", "dev", staging+"-other"))
	must.SliceEmpty(t, u.OthersStagedAt("a1", "other-plugin", staging))

	fi, err := os.Stat(filepath.Join(dir, usageFile))
	must.NoError(t, err)
	must.Eq(t, os.FileMode(0o600), fi.Mode().Perm())

	again, err := OpenUsageRegistry(dir)
	must.NoError(t, err)
	all := again.All()
	must.SliceLen(t, 2, all)
	must.Eq(t, "a1", all[0].AllocID)
	got, ok := again.Get("a2", "vol1")
	must.True(t, ok)
	must.Eq(t, staging, got.StagingPath)

	must.NoError(t, again.Remove("a2", "vol1"))
	must.NoError(t, again.Remove("a2", "vol1"), must.Sprint("removing twice is fine"))
	must.SliceEmpty(t, again.OthersStagedAt("a1", "dev", staging))
	third, err := OpenUsageRegistry(dir)
	must.NoError(t, err)
	must.SliceLen(t, 1, third.All())

	must.NoError(t, os.WriteFile(filepath.Join(dir, usageFile), []byte("[{"), 0o600))
	_, err = OpenUsageRegistry(dir)
	must.ErrorContains(t, err, "is corrupt")
}

func TestCSIPaths(t *testing.T) {
	p := NewCSIPaths("/var/lib/volplane")
	mode := UsageMode(structs.CSIVolumeAccessModeSingleNodeWriter, structs.CSIVolumeAttachmentModeFilesystem, false)
	must.Eq(t, "rw-file-system-single-node-writer", mode)
	must.Eq(t, "/var/lib/volplane/csi/staging/dev/default/db/rw-file-system-single-node-writer",
		p.StagingPath("dev", "", "db", mode))
	must.Eq(t, "/var/lib/volplane/csi/staging/dev/prod/db/rw-file-system-single-node-writer",
		p.StagingPath("dev", "prod", "db", mode))
	must.Eq(t, "/var/lib/volplane/csi/alloc/a1/db[0]", p.TargetPath("a1", "db[0]"))
	must.Eq(t, "/var/lib/volplane/csi/alloc/a1", p.AllocDir("a1"))
	// IDs that are path elements of their own stay inside their directory.
	must.Eq(t, "/var/lib/volplane/csi/alloc/a1/%2E%2E", p.TargetPath("a1", ".."))
	must.Eq(t, "/var/lib/volplane/csi/alloc/%2E/%2E", p.TargetPath(".", "."))
	must.Eq(t, "ro-unknown-unknown", UsageMode("", "", true))
}

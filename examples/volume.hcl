# A volume for the development CSI plugin that `volplane agent -dev` runs.
#
#   volplane volume register examples/volume.hcl
#   volplane volume status database

id        = "database"
name      = "database"
type      = "csi"
namespace = "default"
plugin_id = "dev"

# The storage provider's ID for the volume; the volume ID is used when unset.
external_id = "vol-database-0001"

capacity_min = "10GiB"
capacity_max = "20GiB"

# One node at a time mounts it read-write as a file system.
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

# Passed to the plugin with every call; never shown by the API or the CLI.
secrets {
  password = "not-a-real-password"
}

parameters {
  replicas = "2"
}

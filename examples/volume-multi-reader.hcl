# A data set that many nodes read at once, and one node may write.
#
#   volplane volume register examples/volume-multi-reader.hcl

id        = "reference-data"
name      = "reference data"
type      = "csi"
plugin_id = "dev"

capability {
  access_mode     = "multi-node-reader-only"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "multi-node-single-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type = "ext4"
}

# Only nodes in rack R1 or R2 can reach it.
topology_request {
  required {
    topology {
      segments {
        rack = "R1"
      }
    }
    topology {
      segments {
        rack = "R2"
      }
    }
  }
}

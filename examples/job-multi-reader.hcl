# A batch job whose two allocations read the same volume from any nodes.
#
#   volplane volume register examples/volume-multi-reader.hcl
#   volplane job run examples/job-multi-reader.hcl
#   volplane job status readers
#
# multi-node-reader-only volumes must be requested read_only; any number
# of allocations may then claim them at once.

job "readers" {
  type = "batch"

  group "read" {
    count = 2

    volume "reference" {
      type            = "csi"
      source          = "reference-data"
      read_only       = true
      access_mode     = "multi-node-reader-only"
      attachment_mode = "file-system"
    }

    task "reader" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "ls -l $VOLPLANE_VOLUME_REFERENCE"]
      }

      volume_mount {
        volume           = "reference"
        destination      = "/reference"
        read_only        = true
        propagation_mode = "host-to-task"
      }
    }
  }
}

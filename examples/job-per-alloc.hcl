# A service job of three allocations, each with a volume of its own.
#
# With per_alloc, allocation web.app[N] claims the volume "vol[N]", so
# vol[0], vol[1] and vol[2] must be registered (or created) first, each
# with the single-node-writer / file-system capability:
#
#   volplane volume create vol0.hcl   # id = "vol[0]", and so on
#   volplane job run examples/job-per-alloc.hcl
#   volplane job status web
#
# Without per_alloc, a single-node-writer volume allows one allocation
# only, so a group of count 3 would be refused at registration.

job "web" {
  type = "service"

  group "app" {
    count = 3

    volume "data" {
      type            = "csi"
      source          = "vol"
      per_alloc       = true
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"

      # Replace the volume's own mount options for this group.
      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime"]
      }
    }

    task "writer" {
      driver = "exec"

      # The task finds where its volume is mounted in the environment
      # variable VOLPLANE_VOLUME_<ALIAS>. What it prints is its log:
      # volplane alloc logs <alloc> shows it.
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hi > $VOLPLANE_VOLUME_DATA/hello && echo \"$VOLPLANE_ALLOC_NAME wrote $VOLPLANE_VOLUME_DATA/hello\" && sleep 3600"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}

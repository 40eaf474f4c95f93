# The development CSI plugin's node service, as a job: a system job places
# one on every client, and each client supervises it as a CSI plugin (the
# csi_plugin block): it passes the task CSI_ENDPOINT, waits for the socket,
# fingerprints the plugin, registers it on the node, probes its health and
# restarts it if it dies. Clients need no -csi-plugin flag.
#
#   volplane job run examples/plugin-node.hcl
#   volplane job run examples/plugin-controller.hcl
#   volplane plugin status dev
#
# The plugin keeps its volumes under -state-dir; every instance on a
# machine given the same directory shares them, so the controller's volumes
# are visible to the node plugins. `volplane` must be on the agents' PATH.

job "plugin-dev-nodes" {
  type = "system"

  group "nodes" {
    task "plugin" {
      driver = "exec"

      config {
        command = "volplane"
        # -endpoint defaults to $CSI_ENDPOINT and -node-id to the client's
        # node ID ($VOLPLANE_NODE_ID), both set by the client.
        args = ["csi-dev-plugin", "-state-dir", "/tmp/volplane-csi-dev"]
      }

      csi_plugin {
        id             = "dev"
        type           = "node"
        mount_dir      = "/csi"
        health_timeout = "30s"
      }
    }
  }
}

# The development CSI plugin's controller service, as a job of two
# instances (the scheduler spreads them over the clients). See
# plugin-node.hcl for the node service and how to run both.

job "plugin-dev-controllers" {
  type = "service"

  group "controllers" {
    count = 2

    task "plugin" {
      driver = "exec"

      config {
        command = "volplane"
        args    = ["csi-dev-plugin", "-state-dir", "/tmp/volplane-csi-dev"]
      }

      csi_plugin {
        id             = "dev"
        type           = "controller"
        health_timeout = "30s"
      }
    }
  }
}

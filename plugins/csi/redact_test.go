package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volplane/volplane/structs"
)

// Values that must never be printed.
const (
	secretValue  = "hunter2-secret-value"
	flagValue    = "password=flag-secret-123"
	pubCtxValue  = "pub-secret-token-456"
	pubCtxValue2 = "pub-secret-token-789"
)

// TestClient_NoSecretsInLogsOrErrors: with trace logging, which prints every
// request and response, neither the secrets, nor the mount flags, nor the
// publish context values appear in the log or in the error, even when the
// plugin echoes them in its message. Every mount flag is hidden, as
// volplane never prints them.
func TestClient_NoSecretsInLogsOrErrors(t *testing.T) {
	h := newHarness(t)
	capability := &VolumeCapability{
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		MountOptions:   &structs.CSIMountOptions{FSType: "cifs", MountFlags: []string{flagValue, "noatime"}},
	}
	secrets := structs.CSISecrets{"password": secretValue}
	h.controller.EXPECT().ControllerPublishVolume(gomock.Any(), gomock.Any()).
		Return(&csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{"token": pubCtxValue2}}, nil)
	h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Internal,
		"mount -t cifs -o "+flagValue+",noatime failed; secret "+secretValue+" token "+pubCtxValue))

	pub, err := h.client.ControllerPublishVolume(h.ctx, &ControllerPublishRequest{
		ExternalID: "ext-1", NodeID: "n1", Capability: capability, Secrets: secrets,
	})
	must.NoError(t, err)
	must.Eq(t, pubCtxValue2, pub["token"]) // redacted in the log only

	err = h.client.NodeStageVolume(h.ctx, &NodeStageRequest{
		ExternalID: "ext-1", StagingPath: "/mnt/staging", Capability: capability,
		PublishContext: map[string]string{"token": pubCtxValue}, Secrets: secrets,
	})
	must.Error(t, err)

	logs := h.logs.String()
	must.StrContains(t, logs, "[TRACE] test.csi: calling plugin")
	must.StrContains(t, logs, "NodeStageVolume")
	must.StrContains(t, logs, "***stripped***")
	must.StrContains(t, logs, structs.RedactedValue)
	must.StrContains(t, logs, "cifs") // what is not secret stays readable
	for _, text := range []string{logs, err.Error(), status.Convert(err).Message()} {
		for _, hidden := range []string{secretValue, flagValue, "flag-secret-123", pubCtxValue, pubCtxValue2} {
			must.StrNotContains(t, text, hidden)
		}
	}
	must.EqError(t, err, `NodeStageVolume of volume "ext-1": rpc error: code = Internal desc = `+
		`mount -t cifs -o [REDACTED],[REDACTED] failed; secret [REDACTED] token [REDACTED]`)
}

// TestForLog_LeavesRequestAlone: redacting for the log works on a copy.
func TestForLog_LeavesRequestAlone(t *testing.T) {
	req := &csipb.NodePublishVolumeRequest{
		VolumeId:         "v",
		PublishContext:   map[string]string{"k": pubCtxValue},
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4", flagValue),
		Secrets:          map[string]string{"s": secretValue},
		VolumeContext:    map[string]string{"plain": "visible"},
	}
	line := forLog(req).String()
	must.StrNotContains(t, line, flagValue)
	must.StrNotContains(t, line, pubCtxValue)
	must.StrNotContains(t, line, secretValue)
	must.StrContains(t, line, "visible")

	must.Eq(t, []string{flagValue}, req.GetVolumeCapability().GetMount().GetMountFlags())
	must.Eq(t, pubCtxValue, req.GetPublishContext()["k"])
	must.Eq(t, secretValue, req.GetSecrets()["s"])
	must.SliceContainsAll(t, []string{flagValue, pubCtxValue, secretValue}, sensitiveValues(req))
}

// TestForLog_NestedCapabilities: capabilities in a list (CreateVolume,
// ValidateVolumeCapabilities) are redacted too.
func TestForLog_NestedCapabilities(t *testing.T) {
	req := &csipb.CreateVolumeRequest{
		Name: "v",
		VolumeCapabilities: []*csipb.VolumeCapability{
			mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4", flagValue),
		},
		Secrets: map[string]string{"s": secretValue},
	}
	line := forLog(req).String()
	must.StrNotContains(t, line, flagValue)
	must.StrNotContains(t, line, secretValue)
	must.StrContains(t, line, "ext4")
}

package csimanager

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
)

// CallError maps the error of a CSI call to the typed error servers act
// on: nil for an answer that says the call was already done, retryable for
// one that may pass, internal otherwise. volumeID is the volume the call
// was about, as the plugin knows it.
func CallError(method, volumeID string, err error) error {
	class := csi.ClassOf(method, err)
	if class == csi.ClassAlreadyDone {
		return nil
	}
	var se *structs.Error
	if errors.As(err, &se) {
		// The CSI client refused the request before sending it.
		return structs.NewError(se.Code, "%s", err.Error())
	}
	code := status.Code(err)
	msg := err.Error()
	var ce *csi.Error
	if errors.As(err, &ce) {
		code = ce.Code
		msg = status.Convert(errors.Unwrap(ce)).Message()
	}
	text := method + " of volume " + `"` + volumeID + `"` + " failed with gRPC code " + code.String() + ": " + msg
	switch {
	case class == csi.ClassRetryable:
		return structs.NewError(structs.ErrCodeRetryable, "%s", text)
	case method == csi.MethodControllerPublishVolume && code == codes.FailedPrecondition:
		// Published on another node: possible once that claim is released.
		return structs.NewError(structs.ErrCodeRetryable, "%s", text)
	}
	return structs.NewError(structs.ErrCodeInternal, "%s", text)
}

// Capability is the CSI capability of a volume used with these modes; mount
// options go with file systems only. The allocation runner's stage and
// publish and the ClientCSI controller calls all build theirs here.
func Capability(access structs.CSIVolumeAccessMode, attachment structs.CSIVolumeAttachmentMode, opts *structs.CSIMountOptions) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: access, AttachmentMode: attachment}
	if attachment == structs.CSIVolumeAttachmentModeFilesystem {
		c.MountOptions = opts
	}
	return c
}

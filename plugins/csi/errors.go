package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volplane/volplane/structs"
)

// Names of the CSI RPCs, as they appear in errors and logs and as ClassOf
// takes them.
const (
	MethodGetPluginInfo              = "GetPluginInfo"
	MethodGetPluginCapabilities      = "GetPluginCapabilities"
	MethodProbe                      = "Probe"
	MethodControllerGetCapabilities  = "ControllerGetCapabilities"
	MethodControllerPublishVolume    = "ControllerPublishVolume"
	MethodControllerUnpublishVolume  = "ControllerUnpublishVolume"
	MethodValidateVolumeCapabilities = "ValidateVolumeCapabilities"
	MethodCreateVolume               = "CreateVolume"
	MethodDeleteVolume               = "DeleteVolume"
	MethodNodeGetCapabilities        = "NodeGetCapabilities"
	MethodNodeGetInfo                = "NodeGetInfo"
	MethodNodeStageVolume            = "NodeStageVolume"
	MethodNodeUnstageVolume          = "NodeUnstageVolume"
	MethodNodePublishVolume          = "NodePublishVolume"
	MethodNodeUnpublishVolume        = "NodeUnpublishVolume"
	MethodCreateSnapshot             = "CreateSnapshot"
	MethodDeleteSnapshot             = "DeleteSnapshot"
	MethodListSnapshots              = "ListSnapshots"
	MethodListVolumes                = "ListVolumes"
	MethodControllerExpandVolume     = "ControllerExpandVolume"
	MethodNodeExpandVolume           = "NodeExpandVolume"
)

// ErrorClass says what a caller should do about a failed plugin call.
type ErrorClass int

const (
	// ClassFinal: retrying the same call will not help; someone has to
	// change the request, the volume or the plugin. It is the zero value, so
	// an error nobody classified is never retried forever.
	ClassFinal ErrorClass = iota
	// ClassRetryable: the plugin was busy, unreachable or slow; the same
	// call may succeed later (with backoff).
	ClassRetryable
	// ClassAlreadyDone: the plugin says there is nothing left to undo, which
	// the spec allows for the unpublish, unstage and delete calls.
	ClassAlreadyDone
)

func (c ErrorClass) String() string {
	switch c {
	case ClassFinal:
		return "final"
	case ClassRetryable:
		return "retryable"
	case ClassAlreadyDone:
		return "already-done"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// alreadyDoneOnNotFound are the calls that undo something: NOT_FOUND from
// them means the volume (or its mount, or its attachment) is gone, so the
// undoing has nothing left to do. The servers call them only for volumes and
// nodes they know exist, so a NOT_FOUND here is an earlier attempt's success
// that was not checkpointed.
var alreadyDoneOnNotFound = map[string]bool{
	MethodControllerUnpublishVolume: true,
	MethodNodeUnpublishVolume:       true,
	MethodNodeUnstageVolume:         true,
	MethodDeleteVolume:              true,
	MethodDeleteSnapshot:            true,
}

// listings are the paginated calls: ABORTED from them means the starting
// token is not one the plugin handed out (the spec's code for it), which no
// retry can mend.
var listings = map[string]bool{
	MethodListSnapshots: true,
	MethodListVolumes:   true,
}

// ClassOf classes err, the result of calling the CSI RPC method (one of the
// Method constants; "" means the method recorded in err, when err is an
// *Error of this package).
//
//   - Unavailable, DeadlineExceeded, ResourceExhausted and Aborted are
//     retryable, and so are a cancelled or expired context: the outcome of
//     the call is unknown and the spec lets a CO repeat any call.
//   - NotFound from ControllerUnpublishVolume, NodeUnpublishVolume,
//     NodeUnstageVolume, DeleteVolume and DeleteSnapshot is already-done.
//   - Aborted from ListVolumes and ListSnapshots is final: the starting
//     token is not the plugin's (see IsInvalidToken).
//   - Everything else is final, including Unimplemented (the spec forbids
//     retrying it), a request refused before it was sent, and
//     FailedPrecondition from ControllerPublishVolume: the volume is
//     published on another node, which this call cannot fix, though the
//     server treats it as retryable for the claim, after the other node's
//     claim is released.
//
// A nil err is already-done: there is nothing left to do.
func ClassOf(method string, err error) ErrorClass {
	if err == nil {
		return ClassAlreadyDone
	}
	var e *Error
	if errors.As(err, &e) {
		if method == "" {
			method = e.Method
		}
		if e.local {
			return ClassFinal
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return ClassRetryable
	}
	switch status.Code(err) {
	case codes.Aborted:
		if listings[method] {
			return ClassFinal
		}
		return ClassRetryable
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled:
		return ClassRetryable
	case codes.NotFound:
		if alreadyDoneOnNotFound[method] {
			return ClassAlreadyDone
		}
	}
	return ClassFinal
}

// IsInvalidToken reports whether err, from the listing call method, says
// the starting token was not one the plugin handed out.
func IsInvalidToken(method string, err error) bool {
	return listings[method] && status.Code(err) == codes.Aborted
}

// Error is a failed plugin call, or a request refused before it was sent.
// Its text names the method, the volume and the gRPC code; its status is
// what status.FromError and status.Code report; errors.As reaches the
// underlying error (a gRPC status error, or a *structs.Error with the
// invalid code for a refused request).
//
// The plugin's message is scrubbed of the request's secrets, mount flags and
// publish context values before it is kept, since plugins like to echo their
// mount command.
type Error struct {
	// Method is the CSI RPC, one of the Method constants.
	Method string
	// VolumeID is the storage provider's ID of the volume, "" for calls
	// that concern no volume.
	VolumeID string
	// Code is the gRPC code the plugin returned (InvalidArgument for a
	// request refused before it was sent).
	Code codes.Code

	err error
	// local is set for errors made here rather than by the plugin: they
	// are final whatever their code.
	local bool
}

func (e *Error) Error() string {
	if e.VolumeID == "" {
		return e.Method + ": " + e.err.Error()
	}
	return fmt.Sprintf("%s of volume %q: %s", e.Method, e.VolumeID, e.err.Error())
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.err }

// GRPCStatus makes the code (and the full message) visible to
// status.FromError and status.Code.
func (e *Error) GRPCStatus() *status.Status {
	var inner interface{ GRPCStatus() *status.Status }
	if errors.As(e.err, &inner) {
		if s := inner.GRPCStatus(); s != nil {
			p := s.Proto()
			p.Message = e.Error()
			return status.FromProto(p)
		}
	}
	return status.New(e.Code, e.Error())
}

// invalidRequest refuses a request before it reaches the plugin. problems
// name the missing or wrong fields.
func invalidRequest(method, volumeID string, m *structs.MultiError) error {
	if m.Len() == 0 {
		return nil
	}
	return &Error{
		Method:   method,
		VolumeID: volumeID,
		Code:     codes.InvalidArgument,
		err:      structs.ErrInvalid("%s", strings.Join(m.Errors, "; ")),
		local:    true,
	}
}

// localError is a final error made here (an unusable answer from the plugin,
// for example) with the given code.
func localError(method, volumeID string, code codes.Code, err error) error {
	return &Error{Method: method, VolumeID: volumeID, Code: code, err: err, local: true}
}

// wrapError turns what a gRPC call returned into an *Error, with the values
// in hide scrubbed from the plugin's message.
func wrapError(method, volumeID string, err error, hide []string) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	p := st.Proto()
	p.Message = scrub(p.Message, hide)
	return &Error{Method: method, VolumeID: volumeID, Code: st.Code(), err: status.FromProto(p).Err()}
}

// minScrubLen is the shortest value scrub replaces: replacing every "ro"
// would garble a message ("er[REDACTED]r") while hiding nothing anyone
// could not guess.
const minScrubLen = 4

// scrub replaces every occurrence of each value in hide with the redaction
// marker, longest values first so that a value containing another is hidden
// whole.
func scrub(msg string, hide []string) string {
	if len(hide) == 0 || msg == "" {
		return msg
	}
	vals := make([]string, 0, len(hide))
	for _, v := range hide {
		if len(v) >= minScrubLen {
			vals = append(vals, v)
		}
	}
	// Longest first: with "pw=hunter22" and "hunter22" both listed, the
	// flag is hidden whole rather than leaving "pw=" behind.
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	for _, v := range vals {
		msg = strings.ReplaceAll(msg, v, structs.RedactedValue)
	}
	return msg
}

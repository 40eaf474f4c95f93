package csi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volplane/volplane/structs"
)

func TestClassOf(t *testing.T) {
	st := func(c codes.Code) error { return status.Error(c, "x") }
	cases := []struct {
		method string
		err    error
		want   ErrorClass
	}{
		{MethodNodeStageVolume, st(codes.Unavailable), ClassRetryable},
		{MethodNodeStageVolume, st(codes.DeadlineExceeded), ClassRetryable},
		{MethodNodeStageVolume, st(codes.ResourceExhausted), ClassRetryable},
		{MethodNodeStageVolume, st(codes.Aborted), ClassRetryable},
		{MethodNodeStageVolume, st(codes.Canceled), ClassRetryable},
		{MethodNodeStageVolume, context.DeadlineExceeded, ClassRetryable},
		{MethodNodeStageVolume, st(codes.Internal), ClassFinal},
		{MethodNodeStageVolume, st(codes.Unimplemented), ClassFinal},
		{MethodNodeStageVolume, st(codes.NotFound), ClassFinal},
		{MethodNodeStageVolume, errors.New("plain"), ClassFinal},
		{MethodControllerPublishVolume, st(codes.FailedPrecondition), ClassFinal},
		{MethodControllerPublishVolume, st(codes.NotFound), ClassFinal},
		{MethodControllerPublishVolume, st(codes.AlreadyExists), ClassFinal},
		{MethodControllerUnpublishVolume, st(codes.NotFound), ClassAlreadyDone},
		{MethodNodeUnpublishVolume, st(codes.NotFound), ClassAlreadyDone},
		{MethodNodeUnstageVolume, st(codes.NotFound), ClassAlreadyDone},
		{MethodDeleteVolume, st(codes.NotFound), ClassAlreadyDone},
		{MethodDeleteVolume, st(codes.FailedPrecondition), ClassFinal},
		{MethodProbe, nil, ClassAlreadyDone},
		// The method recorded in the error is used when none is given, and
		// through further wrapping.
		{"", wrapError(MethodNodeUnpublishVolume, "v", st(codes.NotFound), nil), ClassAlreadyDone},
		{"", fmt.Errorf("detach: %w", wrapError(MethodNodeUnstageVolume, "v", st(codes.NotFound), nil)), ClassAlreadyDone},
		{"", wrapError(MethodNodeStageVolume, "v", st(codes.NotFound), nil), ClassFinal},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%v", tc.method, tc.err), func(t *testing.T) {
			must.Eq(t, tc.want, ClassOf(tc.method, tc.err))
		})
	}
}

// TestClient_RetryableRetriedThenReturned: Unavailable is tried the
// configured number of times, then returned with its code.
func TestClient_RetryableRetriedThenReturned(t *testing.T) {
	h := newHarness(t, WithRetries(4, time.Millisecond))
	h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).
		Return(nil, status.Error(codes.Unavailable, "plugin restarting")).Times(4)

	err := h.client.NodeStageVolume(h.ctx, stageRequest())
	must.EqError(t, err, `NodeStageVolume of volume "ext-1": rpc error: code = Unavailable desc = plugin restarting`)
	must.Eq(t, codes.Unavailable, status.Code(err))
	must.Eq(t, ClassRetryable, ClassOf(MethodNodeStageVolume, err))
	must.StrContains(t, h.logs.String(), "plugin call failed, retrying")
}

func TestClient_RetryThenSucceed(t *testing.T) {
	h := newHarness(t)
	gomock.InOrder(
		h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).
			Return(nil, status.Error(codes.Aborted, "operation locked")),
		h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).
			Return(nil, status.Error(codes.ResourceExhausted, "busy")),
		h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).
			Return(&csipb.NodeStageVolumeResponse{}, nil),
	)
	must.NoError(t, h.client.NodeStageVolume(h.ctx, stageRequest()))
}

// TestClient_NotFoundOnUndoIsDone: the undoing calls take NotFound as
// "nothing left to undo", once, without retrying.
func TestClient_NotFoundOnUndoIsDone(t *testing.T) {
	h := newHarness(t)
	notFound := status.Error(codes.NotFound, "no such volume")
	h.node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(nil, notFound).Times(1)
	h.node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(nil, notFound).Times(1)
	h.controller.EXPECT().ControllerUnpublishVolume(gomock.Any(), gomock.Any()).Return(nil, notFound).Times(1)
	h.controller.EXPECT().DeleteVolume(gomock.Any(), gomock.Any()).Return(nil, notFound).Times(1)

	must.NoError(t, h.client.NodeUnpublishVolume(h.ctx, "ext-1", "/mnt/target"))
	must.NoError(t, h.client.NodeUnstageVolume(h.ctx, "ext-1", "/mnt/staging"))
	must.NoError(t, h.client.ControllerUnpublishVolume(h.ctx, &ControllerUnpublishRequest{ExternalID: "ext-1", NodeID: "n1"}))
	must.NoError(t, h.client.DeleteVolume(h.ctx, "ext-1", nil))
	must.StrContains(t, h.logs.String(), "[DEBUG] test.csi: plugin reports nothing left to do")
}

// TestClient_NotFoundOnStageIsFinal: elsewhere NotFound is an error.
func TestClient_NotFoundOnStageIsFinal(t *testing.T) {
	h := newHarness(t)
	h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).
		Return(nil, status.Error(codes.NotFound, "no such volume")).Times(1)
	err := h.client.NodeStageVolume(h.ctx, stageRequest())
	must.Eq(t, codes.NotFound, status.Code(err))
	must.Eq(t, ClassFinal, ClassOf(MethodNodeStageVolume, err))
}

// TestClient_PublishedElsewhereIsFinal: FailedPrecondition from
// ControllerPublishVolume is sent once, classed final, and keeps its code
// and message through the wrap.
func TestClient_PublishedElsewhereIsFinal(t *testing.T) {
	h := newHarness(t)
	h.controller.EXPECT().ControllerPublishVolume(gomock.Any(), gomock.Any()).
		Return(nil, status.Error(codes.FailedPrecondition, "volume is attached to node-2")).Times(1)

	_, err := h.client.ControllerPublishVolume(h.ctx, &ControllerPublishRequest{
		ExternalID: "ext-1", NodeID: "node-1", Capability: fsCapability(),
	})
	must.EqError(t, err, `ControllerPublishVolume of volume "ext-1": rpc error: code = FailedPrecondition desc = volume is attached to node-2`)
	must.Eq(t, ClassFinal, ClassOf(MethodControllerPublishVolume, err))

	var e *Error
	must.True(t, errors.As(err, &e))
	must.Eq(t, MethodControllerPublishVolume, e.Method)
	must.Eq(t, "ext-1", e.VolumeID)
	must.Eq(t, codes.FailedPrecondition, e.Code)
}

// TestClient_InternalIsFinal also checks that the gRPC status is
// recoverable through the wrap and through further wrapping.
func TestClient_InternalIsFinal(t *testing.T) {
	h := newHarness(t)
	h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).
		Return(nil, status.Error(codes.Internal, "mkfs failed")).Times(1)

	err := h.client.NodeStageVolume(h.ctx, stageRequest())
	must.EqError(t, err, `NodeStageVolume of volume "ext-1": rpc error: code = Internal desc = mkfs failed`)
	must.Eq(t, ClassFinal, ClassOf(MethodNodeStageVolume, err))

	s, ok := status.FromError(err)
	must.True(t, ok)
	must.Eq(t, codes.Internal, s.Code())
	must.Eq(t, err.Error(), s.Message())

	outer := fmt.Errorf("mount volume vol-1: %w", err)
	must.Eq(t, codes.Internal, status.Code(outer))
	var inner interface{ GRPCStatus() *status.Status }
	must.True(t, errors.As(errors.Unwrap(err), &inner))
	must.Eq(t, "mkfs failed", inner.GRPCStatus().Message())
}

// TestClient_DeadlineHonoured: a plugin that never answers is abandoned at
// the deadline (the context's, or the client's default), and not retried
// past it.
func TestClient_DeadlineHonoured(t *testing.T) {
	block := func(ctx context.Context, _ any) (*csipb.NodePublishVolumeResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}

	t.Run("context deadline", func(t *testing.T) {
		h := newHarness(t)
		h.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
				return block(ctx, r)
			}).Times(1)
		ctx, cancel := context.WithTimeout(h.ctx, 50*time.Millisecond)
		defer cancel()
		err := h.client.NodePublishVolume(ctx, publishRequest())
		must.Eq(t, codes.DeadlineExceeded, status.Code(err))
		must.Eq(t, ClassRetryable, ClassOf(MethodNodePublishVolume, err))
	})

	t.Run("default deadline", func(t *testing.T) {
		h := newHarness(t, WithTimeout(50*time.Millisecond))
		h.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
				return block(ctx, r)
			}).Times(1)
		err := h.client.NodePublishVolume(h.ctx, publishRequest())
		must.Eq(t, codes.DeadlineExceeded, status.Code(err))
	})
}

// TestClient_DefaultDeadlines: a call made without a deadline reaches the
// plugin with one: the short one for probes, the long one for changes.
func TestClient_DefaultDeadlines(t *testing.T) {
	h := newHarness(t, WithTimeout(time.Hour), WithQueryTimeout(time.Minute))
	deadlines := make(chan time.Duration, 2)
	h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
			d, _ := ctx.Deadline()
			deadlines <- time.Until(d)
			return &csipb.ProbeResponse{}, nil
		})
	h.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, _ *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
			d, _ := ctx.Deadline()
			deadlines <- time.Until(d)
			return &csipb.NodeStageVolumeResponse{}, nil
		})

	_, err := h.client.Probe(context.Background())
	must.NoError(t, err)
	must.NoError(t, h.client.NodeStageVolume(context.Background(), stageRequest()))

	probe, stage := <-deadlines, <-deadlines
	must.Between(t, 50*time.Second, probe, time.Minute)
	must.Between(t, 59*time.Minute, stage, time.Hour)
}

func TestScrub(t *testing.T) {
	hide := []string{"hunter22", "password=hunter22", "ro", ""}
	must.Eq(t, "mount -o [REDACTED],ro failed: error", scrub("mount -o password=hunter22,ro failed: error", hide))
	must.Eq(t, "bad key [REDACTED]", scrub("bad key hunter22", hide))
}

func stageRequest() *NodeStageRequest {
	return &NodeStageRequest{ExternalID: "ext-1", StagingPath: "/mnt/staging", Capability: fsCapability()}
}

func publishRequest() *NodePublishRequest {
	return &NodePublishRequest{ExternalID: "ext-1", TargetPath: "/mnt/target", Capability: fsCapability()}
}

func fsCapability() *VolumeCapability {
	return &VolumeCapability{
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}
}

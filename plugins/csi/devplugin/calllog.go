package devplugin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

const callLogFile = "calls.log"

// Call is one RPC as calls.log records it: what identifies the volume, the
// node and the paths, and how the call ended. Secrets, mount flags and
// volume contexts are never recorded.
type Call struct {
	Time time.Time `json:"time"`
	// Instance is the node ID of the plugin instance that served the call.
	Instance string `json:"instance"`
	// Method is the RPC's name, e.g. "NodeStageVolume".
	Method     string `json:"method"`
	VolumeID   string `json:"volume_id,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	// GroupSnapshotID is the group snapshot a group controller call names.
	GroupSnapshotID string `json:"group_snapshot_id,omitempty"`
	// Name is the name asked for by CreateVolume and CreateSnapshot.
	Name string `json:"name,omitempty"`
	// NodeID is the node a controller call names.
	NodeID      string `json:"node_id,omitempty"`
	StagingPath string `json:"staging_path,omitempty"`
	TargetPath  string `json:"target_path,omitempty"`
	// VolumePath is the path NodeGetVolumeStats, NodeExpandVolume and
	// NodeGetVolumeHealth name.
	VolumePath string `json:"volume_path,omitempty"`
	AccessMode string `json:"access_mode,omitempty"`
	ReadOnly   bool   `json:"readonly,omitempty"`
	// PublishContext is the one ControllerPublishVolume returned, or the
	// one NodeStageVolume and NodePublishVolume were given.
	PublishContext map[string]string `json:"publish_context,omitempty"`
	// RequiredBytes is the capacity range's required bytes a CreateVolume
	// or an expansion asked for; CapacityBytes the size it answered.
	RequiredBytes int64 `json:"required_bytes,omitempty"`
	CapacityBytes int64 `json:"capacity_bytes,omitempty"`
	// Code is how the call ended; Message is the error's message.
	Code    codes.Code `json:"-"`
	Message string     `json:"message,omitempty"`
	// Injected is set when a fault from faults.json decided the outcome.
	Injected bool `json:"injected,omitempty"`
}

type callAlias Call

type callJSON struct {
	callAlias
	Code string `json:"code"`
}

// MarshalJSON writes the code by its spec name ("FAILED_PRECONDITION").
func (c Call) MarshalJSON() ([]byte, error) {
	return json.Marshal(callJSON{callAlias: callAlias(c), Code: codeName(c.Code)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Call) UnmarshalJSON(b []byte) error {
	var j callJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	code, err := parseCode(j.Code)
	if err != nil {
		return err
	}
	*c = Call(j.callAlias)
	c.Code = code
	return nil
}

// ReadCallLog returns the calls served by every instance on stateDir, in
// the order they finished.
func ReadCallLog(stateDir string) ([]Call, error) {
	s := &store{dir: stateDir}
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b, err := os.ReadFile(s.path(callLogFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("devplugin: reading call log: %w", err)
	}
	var calls []Call
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("devplugin: call log line %d: %w", line, err)
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

func (s *store) appendCall(c Call) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	unlock, err := s.lock(true)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := os.OpenFile(s.path(callLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("devplugin: opening call log: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	return errors.Join(werr, f.Close())
}

// describeCall picks the recordable fields out of a request and its
// response. It reads only fields known to carry no secrets.
func describeCall(method string, req, resp any) Call {
	c := Call{Method: method}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		c.VolumeID = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetSourceVolumeId() string }); ok {
		c.VolumeID = r.GetSourceVolumeId()
	}
	if r, ok := req.(interface{ GetSnapshotId() string }); ok {
		c.SnapshotID = r.GetSnapshotId()
	}
	if r, ok := req.(interface{ GetGroupSnapshotId() string }); ok {
		c.GroupSnapshotID = r.GetGroupSnapshotId()
	}
	if r, ok := req.(interface{ GetName() string }); ok {
		c.Name = r.GetName()
	}
	if r, ok := req.(interface{ GetNodeId() string }); ok {
		c.NodeID = r.GetNodeId()
	}
	if r, ok := req.(interface{ GetStagingTargetPath() string }); ok {
		c.StagingPath = r.GetStagingTargetPath()
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok {
		c.TargetPath = r.GetTargetPath()
	}
	if r, ok := req.(interface{ GetVolumePath() string }); ok {
		c.VolumePath = r.GetVolumePath()
	}
	if r, ok := req.(interface{ GetVolumePublishPath() string }); ok {
		c.VolumePath = r.GetVolumePublishPath()
	}
	if r, ok := req.(interface {
		GetVolumeCapability() *csi.VolumeCapability
	}); ok && r.GetVolumeCapability() != nil {
		c.AccessMode = r.GetVolumeCapability().GetAccessMode().GetMode().String()
	}
	if r, ok := req.(interface{ GetReadonly() bool }); ok {
		c.ReadOnly = r.GetReadonly()
	}
	if r, ok := req.(interface{ GetPublishContext() map[string]string }); ok {
		c.PublishContext = cloneMap(r.GetPublishContext())
	}
	if r, ok := req.(interface{ GetCapacityRange() *csi.CapacityRange }); ok {
		c.RequiredBytes = r.GetCapacityRange().GetRequiredBytes()
	}
	switch r := resp.(type) {
	case *csi.CreateVolumeResponse:
		c.VolumeID = r.GetVolume().GetVolumeId()
		c.CapacityBytes = r.GetVolume().GetCapacityBytes()
	case *csi.ControllerExpandVolumeResponse:
		c.CapacityBytes = r.GetCapacityBytes()
	case *csi.NodeExpandVolumeResponse:
		c.CapacityBytes = r.GetCapacityBytes()
	case *csi.CreateSnapshotResponse:
		c.SnapshotID = r.GetSnapshot().GetSnapshotId()
	case *csi.CreateVolumeGroupSnapshotResponse:
		c.GroupSnapshotID = r.GetGroupSnapshot().GetGroupSnapshotId()
	case *csi.ControllerPublishVolumeResponse:
		c.PublishContext = cloneMap(r.GetPublishContext())
	}
	return c
}

package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// The mock volume's secret and one of its mount flags.
const (
	mockSecret = "s3cr3t-token"
	mockFlag   = "password=hunter2"
)

// Volume secrets and mount flags (and a job's mount flags) are sealed
// before they enter the Raft log: the state, the Raft log and a snapshot hold
// only ciphertext, and the server opens them for the plugin and the node.
func TestKeyring_SecretsSealedAtRest(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, s, vol)

	stored, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	must.False(t, stored.HasPlaintextSecrets())
	must.NotNil(t, stored.SealedSecrets)
	must.NotNil(t, stored.MountOptions.SealedFlags)
	opened, err := s.openVolume(stored)
	must.NoError(t, err)
	must.Eq(t, vol.Secrets, opened.Secrets)
	must.Eq(t, vol.MountOptions.MountFlags, opened.MountOptions.MountFlags)

	// Registered again unchanged, it is unchanged in state: the sealed
	// values are kept, not sealed anew.
	registerVolume(t, s, vol)
	again, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	must.Eq(t, stored.ModifyIndex, again.ModifyIndex)

	req := &structs.VolumeRequest{Source: vol.ID, AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		MountOptions: &structs.CSIMountOptions{FSType: "xfs", MountFlags: []string{"job-" + mockFlag}}}
	job := volumeJob("sealed", 1, req)
	must.NoError(t, registerJob(t, s, job))
	storedJob, err := s.State().JobByID(nil, structs.DefaultNamespace, job.ID)
	must.NoError(t, err)
	o := storedJob.TaskGroups[0].Volumes["data"].MountOptions
	must.SliceEmpty(t, o.MountFlags)
	must.NotNil(t, o.SealedFlags)
	// The same job again makes no new version.
	must.NoError(t, registerJob(t, s, volumeJob("sealed", 1, req)))
	again2, err := s.State().JobByID(nil, structs.DefaultNamespace, job.ID)
	must.NoError(t, err)
	must.Eq(t, storedJob.Version, again2.Version)
	openedJob, err := s.openJob(storedJob)
	must.NoError(t, err)
	must.Eq(t, []string{"job-" + mockFlag}, openedJob.TaskGroups[0].Volumes["data"].MountOptions.MountFlags)

	// A sealed value opens only where it was sealed.
	_, err = s.keyring.Open(structs.VolumeSecretsAAD(structs.DefaultNamespace, "other"), stored.SealedSecrets)
	must.Error(t, err)

	must.NoError(t, s.Raft().Snapshot().Error())
	must.Positive(t, testutil.NoSecretInFiles(t, s.config.DataDir, mockSecret, mockFlag))
}

func TestKeyring_Rotate(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, s, vol)
	before, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)

	var rot structs.KeyringRotateResponse
	must.NoError(t, s.RPC("Keyring.Rotate", &structs.KeyringRotateRequest{}, &rot))
	must.NotEq(t, before.SealedSecrets.KeyID, rot.Key.KeyID)
	must.Nil(t, rot.Key.WrappedKey)
	// The old key still opens what it sealed.
	_, err = s.openVolume(before)
	must.NoError(t, err)

	var list structs.KeyringListResponse
	must.NoError(t, s.RPC("Keyring.List", &structs.KeyringListRequest{}, &list))
	must.SliceLen(t, 2, list.Keys)
	active := 0
	for _, k := range list.Keys {
		must.Nil(t, k.WrappedKey)
		if k.Active {
			active++
			must.Eq(t, rot.Key.KeyID, k.KeyID)
		}
	}
	must.Eq(t, 1, active)

	// A full rotation seals every volume again with the new active key.
	must.NoError(t, s.RPC("Keyring.Rotate", &structs.KeyringRotateRequest{Full: true}, &rot))
	must.Eq(t, 1, rot.Resealed)
	after, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	must.Eq(t, rot.Key.KeyID, after.SealedSecrets.KeyID)
	must.Eq(t, rot.Key.KeyID, after.MountOptions.SealedFlags.KeyID)
	opened, err := s.openVolume(after)
	must.NoError(t, err)
	must.Eq(t, vol.Secrets, opened.Secrets)
}

// A volume stored in clear (written before the keyring existed) is sealed
// when a leader sets up its keyring.
func TestKeyring_ClearValuesSealedByTheLeader(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")
	vol := mock.CSIVolume("dev")
	vol.Namespace = structs.DefaultNamespace
	_, _, err := s.raftApply(structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}})
	must.NoError(t, err)
	stored, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	must.True(t, stored.HasPlaintextSecrets())

	must.NoError(t, s.establishKeyring())
	stored, err = s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	must.False(t, stored.HasPlaintextSecrets())
	opened, err := s.openVolume(stored)
	must.NoError(t, err)
	must.Eq(t, vol.Secrets, opened.Secrets)
}

// Every server gets the key-encryption key; after the leader dies the new
// leader opens what the old one sealed.
func TestKeyring_FailoverOpensSecrets(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, leader, vol)

	for _, s := range servers {
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			_, err := os.Stat(filepath.Join(s.config.DataDir, keystoreDirName, kekFileName))
			return err == nil, err
		})
	}
	kek, err := os.ReadFile(filepath.Join(leader.config.DataDir, keystoreDirName, kekFileName))
	must.NoError(t, err)
	for _, s := range servers {
		b, err := os.ReadFile(filepath.Join(s.config.DataDir, keystoreDirName, kekFileName))
		must.NoError(t, err)
		must.Eq(t, kek, b, must.Sprintf("%s holds the cluster's KEK", s.config.NodeName))
		info, err := os.Stat(filepath.Join(s.config.DataDir, keystoreDirName, kekFileName))
		must.NoError(t, err)
		must.Eq(t, os.FileMode(0o600), info.Mode().Perm())
	}

	must.NoError(t, leader.Shutdown())
	rest := followers(servers, leader)
	next := WaitForLeaderOf(t, rest)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		stored, err := next.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
		if err != nil || stored == nil {
			return false, err
		}
		opened, err := next.openVolume(stored)
		if err != nil {
			return false, err
		}
		return opened.Secrets["token"] == mockSecret, nil
	})
}

// A server whose Raft data depends on the keyring will not start without
// its keystore, and says how to restore it.
func TestKeyring_MissingKeystoreRefusesStart(t *testing.T) {
	cfg := TestConfig(t)
	s, err := NewServer(cfg)
	must.NoError(t, err)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")
	registerVolume(t, s, mock.CSIVolume("dev"))
	must.NoError(t, s.Shutdown())

	must.NoError(t, os.RemoveAll(filepath.Join(cfg.DataDir, keystoreDirName)))
	again := *cfg
	_, err = NewServer(&again)
	must.Error(t, err)
	must.True(t, errors.Is(err, errKeystoreMissing), must.Sprint(err))
	must.StrContains(t, err.Error(), "copy the keystore directory from another server")
}

// The leader hands the KEK to a quorum before it seals anything with it:
// lost right after it set up the keyring, a new leader still can.
func TestKeyring_QuorumHoldsTheKEK(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	holders := 0
	for _, s := range servers {
		if s.keyring.currentKEKID() != "" {
			holders++
		}
	}
	must.GreaterEq(t, 2, holders, must.Sprint("a quorum of the 3 servers holds the KEK once the leader is ready"))

	must.NoError(t, leader.Shutdown())
	next := WaitForLeaderOf(t, followers(servers, leader))
	registerNode(t, next, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, next, vol)
	stored, err := next.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	opened, err := next.openVolume(stored)
	must.NoError(t, err)
	must.Eq(t, mockSecret, opened.Secrets["token"])
}

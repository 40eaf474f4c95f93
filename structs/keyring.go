package structs

import (
	"bytes"
	"time"
)

// Sealed is data encrypted with a root key of the cluster keyring
// (AES-256-GCM). Volume secrets and mount flags are kept sealed in the
// replicated state, the Raft log and snapshots; servers open them only to
// call a plugin, or to hand them to the node that claims the volume.
type Sealed struct {
	_struct bool `codec:",omitempty"`
	// KeyID names the root key that sealed it.
	KeyID      string
	Nonce      []byte
	Ciphertext []byte
}

// Copy returns a deep copy.
func (s *Sealed) Copy() *Sealed {
	if s == nil {
		return nil
	}
	return &Sealed{KeyID: s.KeyID, Nonce: bytes.Clone(s.Nonce), Ciphertext: bytes.Clone(s.Ciphertext)}
}

// Equal compares two sealed values byte for byte: the same plaintext sealed
// twice differs, so the leader keeps a stored sealed value whose plaintext
// an update repeats, and equality here means "unchanged".
func (s *Sealed) Equal(o *Sealed) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.KeyID == o.KeyID && bytes.Equal(s.Nonce, o.Nonce) && bytes.Equal(s.Ciphertext, o.Ciphertext)
}

// Associated data of sealed values: a sealed value only opens where it was
// sealed, so one cannot be moved onto another volume or job.
func VolumeSecretsAAD(namespace, id string) string { return "volume-secrets/" + namespace + "/" + id }

// VolumeMountFlagsAAD is the associated data of a volume's mount flags.
func VolumeMountFlagsAAD(namespace, id string) string {
	return "volume-mount-flags/" + namespace + "/" + id
}

// JobMountFlagsAAD is the associated data of a job's volume request's
// mount flags.
func JobMountFlagsAAD(namespace, jobID, group, volume string) string {
	return "job-mount-flags/" + namespace + "/" + jobID + "/" + group + "/" + volume
}

// RootKey is one key of the cluster keyring, as the replicated state keeps
// it: wrapped (AES-256-GCM) by the key-encryption key each server keeps in
// its data dir, never in clear.
type RootKey struct {
	KeyID string
	// WrappedKey is the key sealed by the key-encryption key named KEKID.
	// Never returned by the API.
	WrappedKey []byte `json:"-"`
	KEKID      string
	// Active: new values are sealed with the active key; inactive keys
	// still open what they sealed.
	Active     bool
	CreateTime time.Time

	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy.
func (k *RootKey) Copy() *RootKey {
	if k == nil {
		return nil
	}
	c := *k
	c.WrappedKey = bytes.Clone(k.WrappedKey)
	return &c
}

// Stub is the key as the API shows it: without the wrapped key.
func (k *RootKey) Stub() *RootKey {
	c := k.Copy()
	c.WrappedKey = nil
	return c
}

// RootKeyUpsertRequest adds a root key to the keyring; with Activate it
// becomes the active key and every other key inactive.
type RootKeyUpsertRequest struct {
	Key      *RootKey
	Activate bool
	WriteRequest
}

// KeyringRotateRequest makes a new active root key; with Full every sealed
// value is sealed again with it.
type KeyringRotateRequest struct {
	Full bool
	WriteRequest
}

// KeyringRotateResponse names the new key.
type KeyringRotateResponse struct {
	Key *RootKey
	// Resealed counts the values sealed again (with Full).
	Resealed int
	WriteMeta
}

// KeyringListRequest lists the root keys.
type KeyringListRequest struct {
	QueryOptions
}

// KeyringListResponse carries the keys, without their wrapped material.
type KeyringListResponse struct {
	Keys []*RootKey
	QueryMeta
}

// KeyringExportRequest asks a server for the key-encryption key named
// KEKID; servers only, over mutual TLS.
type KeyringExportRequest struct {
	KEKID string
	GenericRequest
}

// KeyringExportResponse carries the key-encryption key.
type KeyringExportResponse struct {
	KEK []byte `json:"-"`
}

// KeyringImportRequest hands a server the key-encryption key the leader
// is about to seal with; servers only, over mutual TLS.
type KeyringImportRequest struct {
	KEK []byte `json:"-"`
	GenericRequest
}

// CSIVolumeResealRequest replaces the sealed secrets and mount flags of
// volumes (a full keyring rotation); nothing else about them changes.
type CSIVolumeResealRequest struct {
	Volumes []*CSIVolumeSealed
	WriteRequest
}

// CSIVolumeSealed is one volume's sealed values.
type CSIVolumeSealed struct {
	Namespace   string
	ID          string
	Secrets     *Sealed
	MountFlags  *Sealed
	ModifyIndex uint64 // the volume's index the values were read at
}

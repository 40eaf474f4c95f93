package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Keyring is the cluster keyring's endpoint: rotation, listing, and the
// export of the key-encryption key to another server.
type Keyring struct {
	srv *Server
}

// Rotate makes a new active root key; with Full, every volume's secrets and
// mount flags are sealed again with it.
func (e *Keyring) Rotate(args *structs.KeyringRotateRequest, reply *structs.KeyringRotateResponse) error {
	if done, err := e.srv.forward("Keyring.Rotate", args, args, reply); done {
		return err
	}
	key, index, err := e.srv.addRootKey()
	if err != nil {
		return err
	}
	reply.Key, reply.Index = key.Stub(), index
	if args.Full {
		n, idx, err := e.srv.resealVolumes(false)
		if err != nil {
			return structs.Wrap(err, "root key %s is active, but sealing the volumes again failed", key.KeyID)
		}
		reply.Resealed = n
		reply.Index = max(reply.Index, idx)
	}
	e.srv.logger.Info("keyring rotated", "key_id", key.KeyID, "full", args.Full, "resealed", reply.Resealed)
	return nil
}

// List returns the root keys, never their material.
func (e *Keyring) List(args *structs.KeyringListRequest, reply *structs.KeyringListResponse) error {
	if done, err := e.srv.forward("Keyring.List", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.RootKeys(ws)
		if err != nil {
			return 0, err
		}
		reply.Keys = []*structs.RootKey{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			reply.Keys = append(reply.Keys, raw.(*structs.RootKey).Stub())
		}
		return st.Index(state.TableRootKeys)
	})
}

// ExportKEK hands this server's key-encryption key to another server that
// lacks it (one that joined, or lost its keystore's copy). It is answered
// locally, and only to servers (certificate role server when tls.rpc is on).
func (e *Keyring) ExportKEK(args *structs.KeyringExportRequest, reply *structs.KeyringExportResponse) error {
	kek, ok := e.srv.keyring.exportKEK(args.KEKID)
	if !ok {
		return structs.ErrNotFound("this server does not hold key-encryption key %q", args.KEKID)
	}
	reply.KEK = kek
	return nil
}

// establishKeyring makes sure, on a new leader, that the keyring has an
// active root key this server can use, creating the first one (and the
// key-encryption key) in a new cluster, then seals what the state still
// holds in clear (volumes registered before the keyring existed).
func (s *Server) establishKeyring() error {
	st := s.State()
	active, err := st.ActiveRootKey(nil)
	if err != nil {
		return err
	}
	if active == nil {
		if _, _, err := s.addRootKey(); err != nil {
			return err
		}
	} else if err := s.keyring.ensureKEK(active.KEKID); err != nil {
		return err
	}
	if n, _, err := s.resealVolumes(true); err != nil {
		return err
	} else if n > 0 {
		s.logger.Info("sealed the secrets of volumes stored in clear", "volumes", n)
	}
	return nil
}

// addRootKey writes a new active root key wrapped by the cluster's KEK
// (made now in a new cluster).
func (s *Server) addRootKey() (*structs.RootKey, uint64, error) {
	want := ""
	if active, err := s.State().ActiveRootKey(nil); err != nil {
		return nil, 0, err
	} else if active != nil {
		want = active.KEKID
	}
	if err := s.keyring.ensureKEK(want); err != nil {
		return nil, 0, err
	}
	// A quorum of servers holds the KEK before anything is sealed with
	// it: whichever of them leads next can open the secrets, even if this
	// server is never seen again.
	if err := s.distributeKEK(); err != nil {
		return nil, 0, err
	}
	key, err := s.keyring.newRootKey()
	if err != nil {
		return nil, 0, err
	}
	_, index, err := s.raftApply(structs.RootKeyUpsertRequestType, &structs.RootKeyUpsertRequest{Key: key, Activate: true})
	if err != nil {
		return nil, 0, err
	}
	return key, index, nil
}

// resealBatch bounds the volumes one reseal entry carries.
const resealBatch = 100

// resealVolumes seals again, with the active root key, the secrets and
// mount flags of every volume that has any (onlyClear: only of those that
// hold them in clear). It reports how many volumes it changed.
func (s *Server) resealVolumes(onlyClear bool) (int, uint64, error) {
	st := s.State()
	active, err := st.ActiveRootKey(nil)
	if err != nil || active == nil {
		return 0, 0, err
	}
	iter, err := st.CSIVolumesByNamespace(nil, state.AllNamespaces, "")
	if err != nil {
		return 0, 0, err
	}
	var batch []*structs.CSIVolumeSealed
	var index uint64
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, idx, err := s.raftApply(structs.CSIVolumeResealRequestType, &structs.CSIVolumeResealRequest{Volumes: batch})
		if err != nil {
			return err
		}
		index, n, batch = idx, n+len(batch), nil
		return nil
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		vol := raw.(*structs.CSIVolume)
		sealedWithActive := (vol.SealedSecrets == nil || vol.SealedSecrets.KeyID == active.KeyID) &&
			(vol.MountOptions == nil || vol.MountOptions.SealedFlags == nil || vol.MountOptions.SealedFlags.KeyID == active.KeyID)
		if !vol.HasPlaintextSecrets() && (onlyClear || sealedWithActive) {
			continue
		}
		opened, err := s.openVolume(vol)
		if err != nil {
			return n, index, err
		}
		if err := s.sealVolume(opened, nil); err != nil {
			return n, index, err
		}
		entry := &structs.CSIVolumeSealed{Namespace: vol.Namespace, ID: vol.ID, Secrets: opened.SealedSecrets, ModifyIndex: vol.ModifyIndex}
		if opened.MountOptions != nil {
			entry.MountFlags = opened.MountOptions.SealedFlags
		}
		batch = append(batch, entry)
		if len(batch) == resealBatch {
			if err := flush(); err != nil {
				return n, index, err
			}
		}
	}
	return n, index, flush()
}

// watchKeyring makes sure, on every server, that the KEK the keyring's
// root keys are wrapped with is in the keystore before this server needs
// it (after a failover, say): a server that lacks it gets it from another.
func (s *Server) watchKeyring() {
	delay := time.Second
	for {
		st := s.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		iter, err := st.RootKeys(ws)
		failed := err != nil
		for raw := iter.Next(); err == nil && raw != nil; raw = iter.Next() {
			if kerr := s.keyring.ensureKEK(raw.(*structs.RootKey).KEKID); kerr != nil {
				s.logger.Warn("the keyring's key-encryption key is not available yet; retrying", "error", kerr, "retry_in", delay)
				failed = true
				break
			}
		}
		if failed {
			select {
			case <-s.shutdownCtx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
			continue
		}
		delay = time.Second
		if ws.WatchCtx(s.shutdownCtx) != nil {
			return
		}
	}
}

// fetchKEK asks the other servers, all at once, for the KEK named id, and
// takes the first answer: a paused server must not hold up the others'.
func (s *Server) fetchKEK(id string) ([]byte, error) {
	others := s.OtherServers()
	if len(others) == 0 {
		return nil, structs.ErrNotFound("no other server to ask")
	}
	type answer struct {
		kek []byte
		err error
	}
	answers := make(chan answer, len(others))
	for _, addr := range others {
		go func() {
			var reply structs.KeyringExportResponse
			err := s.pool.RPC(addr, "Keyring.ExportKEK", &structs.KeyringExportRequest{KEKID: id}, &reply)
			answers <- answer{reply.KEK, err}
		}()
	}
	var errs []error
	for range others {
		a := <-answers
		if a.err == nil {
			return a.kek, nil
		}
		errs = append(errs, a.err)
	}
	return nil, errors.Join(errs...)
}

// distributeKEK gives this server's KEK to every other voter, and returns
// once a quorum of voters (this one included) holds it.
func (s *Server) distributeKEK() error {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	voters := 0
	var others []string
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage != raft.Voter {
			continue
		}
		voters++
		if srv.ID != raft.ServerID(s.nodeID) {
			others = append(others, string(srv.Address))
		}
	}
	kek, ok := s.keyring.exportKEK(s.keyring.currentKEKID())
	if !ok {
		return errors.New("no key-encryption key to hand out")
	}
	need := voters/2 + 1 - 1 // this server holds it
	errs := make(chan error, len(others))
	for _, addr := range others {
		go func() {
			errs <- s.pool.RPC(addr, "Keyring.ImportKEK", &structs.KeyringImportRequest{KEK: kek}, &structs.GenericResponse{})
		}()
	}
	var failed []error
	for range others {
		if need <= 0 {
			break
		}
		if err := <-errs; err != nil {
			failed = append(failed, err)
		} else {
			need--
		}
	}
	if need > 0 {
		return fmt.Errorf("handing the key-encryption key to a quorum of servers: %w", errors.Join(failed...))
	}
	return nil
}

// ImportKEK takes the key-encryption key from the leader that is about to
// seal with it. A server that holds another KEK keeps its own while its
// state has root keys wrapped by it.
func (e *Keyring) ImportKEK(args *structs.KeyringImportRequest, reply *structs.GenericResponse) error {
	if len(args.KEK) != keySize {
		return structs.ErrInvalid("key-encryption key of %d bytes, want %d", len(args.KEK), keySize)
	}
	id := kekID(args.KEK)
	if cur := e.srv.keyring.currentKEKID(); cur != "" && cur != id {
		iter, err := e.srv.State().RootKeys(nil)
		if err != nil {
			return err
		}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			if raw.(*structs.RootKey).KEKID == cur {
				return structs.ErrConflict("this server's key-encryption key %s wraps root keys already", cur)
			}
		}
	}
	return e.srv.keyring.importKEK(args.KEK)
}

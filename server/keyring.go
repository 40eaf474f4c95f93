package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-uuid"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// The cluster keyring seals volume secrets and mount flags before they
// enter a Raft entry. Its root keys live in the replicated state, each
// wrapped by the key-encryption key (KEK); the KEK never enters Raft: every
// server keeps it in DATA_DIR/keystore/ (mode 0600), and a server that
// lacks it gets it from another server over mutual TLS. The Raft log and
// snapshots thus hold only ciphertext and wrapped keys.
const (
	keystoreDirName = "keystore"
	kekFileName     = "kek.json"
	// keyringMarker, in the raft dir, records that this server's Raft
	// data depends on the keystore: with it and without the keystore the
	// server refuses to start.
	keyringMarker = "keyring-in-use"
	keySize       = 32 // AES-256
)

// kekFile is the keystore's content.
type kekFile struct {
	KEKID string
	KEK   []byte
}

// keyring seals and opens values with the cluster's root keys.
type keyring struct {
	dir    string // DATA_DIR/keystore
	marker string // DATA_DIR/raft/keyring-in-use
	logger hclog.Logger
	state  func() *state.StateStore
	// fetch asks the other servers for the KEK named kekID.
	fetch func(kekID string) ([]byte, error)

	mu    sync.Mutex
	kek   []byte
	kekID string
	// keys holds the opened root keys by key ID, each as its AES-GCM
	// cipher: building one (the AES key schedule and GCM tables) cost more
	// than sealing a volume's secrets, on every register.
	keys map[string]cipher.AEAD
}

// errKeystoreMissing is why a server refuses to start.
var errKeystoreMissing = errors.New("keystore missing")

// openKeyring loads the server's keystore. A server whose Raft data was
// written with a keyring (the marker) but whose keystore is gone cannot open
// the secrets in its state: it refuses to start, saying how to restore it.
func openKeyring(dataDir string, logger hclog.Logger, st func() *state.StateStore) (*keyring, error) {
	k := &keyring{
		logger: logger.Named("keyring"),
		state:  st,
		keys:   map[string]cipher.AEAD{},
	}
	if dataDir == "" {
		// A dev server without a data dir keeps its Raft log in memory:
		// the KEK lives as long as the log, in memory too.
		return k, nil
	}
	k.dir = filepath.Join(dataDir, keystoreDirName)
	k.marker = filepath.Join(dataDir, raftDirName, keyringMarker)
	b, err := os.ReadFile(filepath.Join(k.dir, kekFileName))
	switch {
	case err == nil:
		var f kekFile
		if err := json.Unmarshal(b, &f); err != nil || len(f.KEK) != keySize || f.KEKID != kekID(f.KEK) {
			return nil, fmt.Errorf("keystore %s is corrupt: restore DATA_DIR/%s/%s from a backup or from another server of the cluster",
				k.dir, keystoreDirName, kekFileName)
		}
		k.kek, k.kekID = f.KEK, f.KEKID
	case errors.Is(err, os.ErrNotExist):
		if _, merr := os.Stat(k.marker); merr == nil {
			return nil, fmt.Errorf("%w: %s holds Raft data sealed with the cluster keyring, but %s is missing; "+
				"copy the %s directory from another server of the cluster into %s (it holds the key-encryption key, the same on every server), "+
				"or, to rejoin as a new server, remove %s entirely",
				errKeystoreMissing, dataDir, k.dir, keystoreDirName, dataDir, dataDir)
		}
	default:
		return nil, fmt.Errorf("reading the keystore: %w", err)
	}
	return k, nil
}

func kekID(kek []byte) string {
	sum := sha256.Sum256(kek)
	return hex.EncodeToString(sum[:8])
}

// setKEK stores a key-encryption key in the keystore and marks the Raft
// data as depending on it.
func (k *keyring) setKEKLocked(kek []byte) error {
	id := kekID(kek)
	if k.dir == "" {
		k.kek, k.kekID = kek, id
		return nil
	}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return fmt.Errorf("creating the keystore: %w", err)
	}
	b, err := json.Marshal(kekFile{KEKID: id, KEK: kek})
	if err != nil {
		return err
	}
	tmp := filepath.Join(k.dir, kekFileName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing the keystore: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, kekFileName)); err != nil {
		return fmt.Errorf("writing the keystore: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(k.marker), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(k.marker, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("marking the raft data as sealed: %w", err)
	}
	k.kek, k.kekID = kek, id
	k.logger.Info("key-encryption key stored in the keystore", "kek_id", id)
	return nil
}

// ensureKEK makes sure this server holds the KEK named want; "" means any
// (a new one is made when it has none).
func (k *keyring) ensureKEK(want string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case want == "" && k.kek != nil, want != "" && want == k.kekID:
		return nil
	case want == "":
		kek := make([]byte, keySize)
		if _, err := rand.Read(kek); err != nil {
			return err
		}
		return k.setKEKLocked(kek)
	}
	if k.fetch == nil {
		return fmt.Errorf("this server lacks key-encryption key %s and cannot ask another server", want)
	}
	kek, err := k.fetch(want)
	if err != nil {
		return fmt.Errorf("getting key-encryption key %s from another server: %w", want, err)
	}
	if kekID(kek) != want {
		return fmt.Errorf("a server answered key-encryption key %s for %s", kekID(kek), want)
	}
	return k.setKEKLocked(kek)
}

// currentKEKID names the KEK this server holds, "" for none.
func (k *keyring) currentKEKID() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kekID
}

// importKEK stores a KEK another server handed out.
func (k *keyring) importKEK(kek []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kekID == kekID(kek) {
		return nil
	}
	return k.setKEKLocked(kek)
}

// exportKEK returns this server's KEK when it is the one named.
func (k *keyring) exportKEK(id string) ([]byte, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kek == nil || k.kekID != id {
		return nil, false
	}
	return k.kek, true
}

// newRootKey makes a root key wrapped by this server's KEK, for the leader
// to write.
func (k *keyring) newRootKey() (*structs.RootKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kek == nil {
		return nil, errors.New("no key-encryption key")
	}
	id, err := uuid.GenerateUUID()
	if err != nil {
		return nil, err
	}
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	wrapped, err := seal(k.kek, []byte("root-key/"+id), key)
	if err != nil {
		return nil, err
	}
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	k.keys[id] = aead
	return &structs.RootKey{KeyID: id, WrappedKey: append(wrapped.Nonce, wrapped.Ciphertext...), KEKID: k.kekID,
		CreateTime: time.Now().UTC()}, nil
}

// rootKey returns the cipher of the opened root key id, unwrapping it from
// the state (and getting its KEK from another server first when needed).
func (k *keyring) rootKey(id string) (cipher.AEAD, error) {
	k.mu.Lock()
	key, ok := k.keys[id]
	k.mu.Unlock()
	if ok {
		return key, nil
	}
	rk, err := k.state().RootKeyByID(nil, id)
	if err != nil {
		return nil, err
	}
	if rk == nil {
		return nil, fmt.Errorf("root key %s is not in the keyring", id)
	}
	if err := k.ensureKEK(rk.KEKID); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(rk.WrappedKey) <= 12 {
		return nil, fmt.Errorf("root key %s is malformed", id)
	}
	raw, err := open(k.kek, []byte("root-key/"+id), &structs.Sealed{Nonce: rk.WrappedKey[:12], Ciphertext: rk.WrappedKey[12:]})
	if err != nil {
		return nil, fmt.Errorf("unwrapping root key %s: %w", id, err)
	}
	if key, err = newGCM(raw); err != nil {
		return nil, fmt.Errorf("root key %s: %w", id, err)
	}
	k.keys[id] = key
	return key, nil
}

// Seal encrypts plaintext with the active root key, bound to aad.
func (k *keyring) Seal(aad string, plaintext []byte) (*structs.Sealed, error) {
	active, err := k.state().ActiveRootKey(nil)
	if err != nil {
		return nil, err
	}
	if active == nil {
		return nil, structs.NewError(structs.ErrCodeRetryable, "the cluster keyring is not ready yet")
	}
	key, err := k.rootKey(active.KeyID)
	if err != nil {
		return nil, err
	}
	s, err := sealWith(key, []byte(aad), plaintext)
	if err != nil {
		return nil, err
	}
	s.KeyID = active.KeyID
	return s, nil
}

// Open decrypts a sealed value bound to aad.
func (k *keyring) Open(aad string, s *structs.Sealed) ([]byte, error) {
	key, err := k.rootKey(s.KeyID)
	if err != nil {
		return nil, err
	}
	return openWith(key, []byte(aad), s)
}

func seal(key, aad, plaintext []byte) (*structs.Sealed, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return sealWith(gcm, aad, plaintext)
}

// sealWith encrypts plaintext with gcm under a fresh random nonce. An AEAD
// of crypto/cipher keeps no state between calls, so one is shared by
// concurrent calls.
func sealWith(gcm cipher.AEAD, aad, plaintext []byte) (*structs.Sealed, error) {
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &structs.Sealed{Nonce: nonce, Ciphertext: gcm.Seal(nil, nonce, plaintext, aad)}, nil
}

func open(key, aad []byte, s *structs.Sealed) ([]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return openWith(gcm, aad, s)
}

func openWith(gcm cipher.AEAD, aad []byte, s *structs.Sealed) ([]byte, error) {
	if len(s.Nonce) != gcm.NonceSize() {
		return nil, errors.New("sealed value has a malformed nonce")
	}
	out, err := gcm.Open(nil, s.Nonce, s.Ciphertext, aad)
	if err != nil {
		// Never the value: the error says only that it does not open.
		return nil, errors.New("sealed value does not open (wrong key or not sealed for this object)")
	}
	return out, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

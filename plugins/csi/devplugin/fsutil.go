package devplugin

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// VolumeDataDir is the directory that holds the data of volume id on
// stateDir: what a publication of the volume shows.
func VolumeDataDir(stateDir, id string) string {
	return (&store{dir: stateDir}).volumeDir(id)
}

func newID(prefix string) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("devplugin: no randomness: %v", err))
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// makeVolumeDir creates a volume's data directory, as a copy of from when
// from is set. It is world-writable like a fresh file system's root as
// seen by a task that runs as another user.
func (s *store) makeVolumeDir(id, from string) error {
	dir := s.volumeDir(id)
	var err error
	if from != "" {
		err = copyTree(from, dir)
	} else {
		err = os.Mkdir(dir, 0o777)
	}
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("devplugin: creating data of volume %s: %w", id, err)
	}
	return nil
}

// copyTree copies the directory src to dst (which must not exist): files,
// directories and symbolic links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case d.Type().IsRegular():
			return copyFile(path, to, info.Mode().Perm())
		}
		// Sockets, devices and pipes are not data.
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// diskUsage adds up the sizes of the regular files under dir.
func diskUsage(dir string) (bytes, inodes int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			bytes += info.Size()
		}
		return nil
	})
	return bytes, inodes, err
}

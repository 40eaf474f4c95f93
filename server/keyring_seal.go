package server

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/volplane/volplane/structs"
)

// sealVolume turns the secrets and mount flags vol carries in clear into
// sealed values, as the replicated state keeps them. Where existing (the
// stored volume, or nil) already holds the same plaintext, its sealed value
// is kept, so a volume registered again unchanged is unchanged in state.
func (s *Server) sealVolume(vol, existing *structs.CSIVolume) error {
	var oldSecrets structs.CSISecrets
	var oldFlags []string
	if existing != nil {
		opened, err := s.openVolume(existing)
		if err != nil {
			return err
		}
		oldSecrets = opened.Secrets
		if opened.MountOptions != nil {
			oldFlags = opened.MountOptions.MountFlags
		}
	}
	switch {
	case len(vol.Secrets) == 0:
		vol.SealedSecrets = nil
	case existing != nil && existing.SealedSecrets != nil && maps.Equal(vol.Secrets, oldSecrets):
		vol.SealedSecrets = existing.SealedSecrets.Copy()
	default:
		sealed, err := s.sealJSON(structs.VolumeSecretsAAD(vol.Namespace, vol.ID), vol.Secrets)
		if err != nil {
			return structs.Wrap(err, "volume %q: sealing its secrets", vol.ID)
		}
		vol.SealedSecrets = sealed
	}
	vol.Secrets = nil
	if o := vol.MountOptions; o != nil && len(o.MountFlags) > 0 {
		if existing != nil && existing.MountOptions != nil && existing.MountOptions.SealedFlags != nil &&
			slices.Equal(o.MountFlags, oldFlags) {
			o.SealedFlags = existing.MountOptions.SealedFlags.Copy()
		} else {
			sealed, err := s.sealJSON(structs.VolumeMountFlagsAAD(vol.Namespace, vol.ID), o.MountFlags)
			if err != nil {
				return structs.Wrap(err, "volume %q: sealing its mount flags", vol.ID)
			}
			o.SealedFlags = sealed
		}
		o.MountFlags = nil
	}
	return nil
}

// openVolume returns a copy of vol with its secrets and mount flags in
// clear, for a plugin call or for the node that claims it. A volume stored
// before the keyring existed has them in clear already.
func (s *Server) openVolume(vol *structs.CSIVolume) (*structs.CSIVolume, error) {
	out := vol.Copy()
	if out.SealedSecrets != nil {
		if err := s.openJSON(structs.VolumeSecretsAAD(vol.Namespace, vol.ID), out.SealedSecrets, &out.Secrets); err != nil {
			return nil, structs.Wrap(err, "volume %q: opening its secrets", vol.ID)
		}
		out.SealedSecrets = nil
	}
	if o := out.MountOptions; o != nil && o.SealedFlags != nil {
		if err := s.openJSON(structs.VolumeMountFlagsAAD(vol.Namespace, vol.ID), o.SealedFlags, &o.MountFlags); err != nil {
			return nil, structs.Wrap(err, "volume %q: opening its mount flags", vol.ID)
		}
		o.SealedFlags = nil
	}
	return out, nil
}

// sealJob seals the mount flags of the job's volume requests, keeping the
// sealed value of existing (the stored job, or nil) where the flags are the
// same, so that registering a job again unchanged makes no new version.
func (s *Server) sealJob(job, existing *structs.Job) error {
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		for alias, req := range tg.Volumes {
			if req == nil || req.MountOptions == nil || len(req.MountOptions.MountFlags) == 0 {
				continue
			}
			o := req.MountOptions
			aad := structs.JobMountFlagsAAD(job.Namespace, job.ID, tg.Name, alias)
			if old := existingJobFlags(existing, tg.Name, alias); old != nil {
				var flags []string
				if err := s.openJSON(aad, old, &flags); err == nil && slices.Equal(flags, o.MountFlags) {
					o.SealedFlags, o.MountFlags = old.Copy(), nil
					continue
				}
			}
			sealed, err := s.sealJSON(aad, o.MountFlags)
			if err != nil {
				return structs.Wrap(err, "job %q: group %q: volume %q: sealing its mount flags", job.ID, tg.Name, alias)
			}
			o.SealedFlags, o.MountFlags = sealed, nil
		}
	}
	return nil
}

func existingJobFlags(job *structs.Job, group, alias string) *structs.Sealed {
	if job == nil {
		return nil
	}
	tg := job.LookupTaskGroup(group)
	if tg == nil || tg.Volumes[alias] == nil || tg.Volumes[alias].MountOptions == nil {
		return nil
	}
	return tg.Volumes[alias].MountOptions.SealedFlags
}

// openJob returns a copy of job with its volume requests' mount flags in
// clear, for the node that runs its allocations.
func (s *Server) openJob(job *structs.Job) (*structs.Job, error) {
	out := job.Copy()
	for _, tg := range out.TaskGroups {
		if tg == nil {
			continue
		}
		for alias, req := range tg.Volumes {
			if req == nil || req.MountOptions == nil || req.MountOptions.SealedFlags == nil {
				continue
			}
			o := req.MountOptions
			if err := s.openJSON(structs.JobMountFlagsAAD(job.Namespace, job.ID, tg.Name, alias), o.SealedFlags, &o.MountFlags); err != nil {
				return nil, structs.Wrap(err, "job %q: group %q: volume %q: opening its mount flags", job.ID, tg.Name, alias)
			}
			o.SealedFlags = nil
		}
	}
	return out, nil
}

func (s *Server) sealJSON(aad string, v any) (*structs.Sealed, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return s.keyring.Seal(aad, b)
}

func (s *Server) openJSON(aad string, sealed *structs.Sealed, out any) error {
	b, err := s.keyring.Open(aad, sealed)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

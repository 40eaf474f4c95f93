package csi

import (
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/volplane/volplane/structs"
)

// What a CSI message may carry that must not reach a log line or an error:
//   - fields the spec marks csi_secret (the secrets maps);
//   - mount flags, which can hold credentials ("password=...") and which
//     protosanitizer does not know about;
//   - publish context values, which the controller may use to hand the node
//     plugin a credential (volplane's API hides them for the same reason).
const (
	fieldMountFlags     protoreflect.Name = "mount_flags"
	fieldPublishContext protoreflect.Name = "publish_context"
)

// forLog returns msg in a form fit for a log line: a copy with mount flags
// and publish context values replaced by the redaction marker, printed by
// protosanitizer, which strips the secrets. The copy is made only if the
// line is printed.
func forLog(msg proto.Message) fmt.Stringer {
	return lazyRedacted{msg}
}

type lazyRedacted struct{ msg proto.Message }

func (l lazyRedacted) String() string {
	if l.msg == nil {
		return "null"
	}
	c := proto.Clone(l.msg)
	eachSensitive(c.ProtoReflect(), func(string) string { return structs.RedactedValue })
	return protosanitizer.StripSecrets(c).String()
}

// sensitiveValues lists every secret value, mount flag and publish context
// value in msg, for scrubbing a plugin's error message.
func sensitiveValues(msg proto.Message) []string {
	if msg == nil {
		return nil
	}
	var out []string
	eachSensitive(msg.ProtoReflect(), func(v string) string {
		out = append(out, v)
		return v
	})
	return out
}

// eachSensitive calls fn with every sensitive string in m, at any depth, and
// stores what fn returns in its place when it differs.
func eachSensitive(m protoreflect.Message, fn func(string) string) {
	replace := func(s string) (protoreflect.Value, bool) {
		r := fn(s)
		return protoreflect.ValueOfString(r), r != s
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.StringKind && fd.Name() == fieldMountFlags:
			l := v.List()
			for i := range l.Len() {
				if r, changed := replace(l.Get(i).String()); changed {
					l.Set(i, r)
				}
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind &&
			(fd.Name() == fieldPublishContext || isSecretField(fd)):
			mp := v.Map()
			var keys []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			for _, k := range keys {
				if r, changed := replace(mp.Get(k).String()); changed {
					mp.Set(k, r)
				}
			}
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap() && isSecretField(fd):
			if r, changed := replace(v.String()); changed {
				m.Set(fd, r)
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := range l.Len() {
				eachSensitive(l.Get(i).Message(), fn)
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				eachSensitive(mv.Message(), fn)
				return true
			})
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			eachSensitive(v.Message(), fn)
		}
		return true
	})
}

// isSecretField reports whether the spec marks the field csi_secret.
func isSecretField(fd protoreflect.FieldDescriptor) bool {
	b, _ := proto.GetExtension(fd.Options(), csipb.E_CsiSecret).(bool)
	return b
}

package devplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

const faultsFile = "faults.json"

// Fault is what an injected fault does to the calls of one method. See the
// package documentation for the file it is kept in.
type Fault struct {
	// Code, when not OK, fails the call with this gRPC code before the
	// plugin does anything.
	Code codes.Code
	// Message is the error message with Code (a default one when empty).
	Message string
	// Times > 0 applies the fault to that many calls and then removes it;
	// 0 applies it to every call until it is cleared.
	Times int
	// Hang blocks the call until its context ends or the plugin stops.
	Hang bool
	// NotReady makes Probe answer ready=false (Probe only).
	NotReady bool
}

type faultJSON struct {
	Code     json.RawMessage `json:"code,omitempty"`
	Message  string          `json:"message,omitempty"`
	Times    int             `json:"times,omitempty"`
	Hang     bool            `json:"hang,omitempty"`
	NotReady bool            `json:"not_ready,omitempty"`
}

// MarshalJSON writes the code by its spec name.
func (f Fault) MarshalJSON() ([]byte, error) {
	j := faultJSON{Message: f.Message, Times: f.Times, Hang: f.Hang, NotReady: f.NotReady}
	if f.Code != codes.OK {
		j.Code, _ = json.Marshal(codeName(f.Code))
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the code as a name or a number.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var j faultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = Fault{Message: j.Message, Times: j.Times, Hang: j.Hang, NotReady: j.NotReady}
	if len(j.Code) == 0 || bytes.Equal(j.Code, []byte("null")) {
		return nil
	}
	var s string
	if j.Code[0] != '"' {
		s = string(j.Code)
	} else if err := json.Unmarshal(j.Code, &s); err != nil {
		return err
	}
	c, err := parseCode(s)
	if err != nil {
		return err
	}
	f.Code = c
	return nil
}

func (f Fault) validate(method string) error {
	if _, ok := methodNames[method]; !ok {
		return fmt.Errorf("devplugin: no CSI method %q", method)
	}
	if f.Times < 0 {
		return fmt.Errorf("devplugin: fault for %s: times must not be negative", method)
	}
	if f.NotReady && method != "Probe" {
		return fmt.Errorf("devplugin: fault for %s: not_ready applies to Probe only", method)
	}
	if f.Code == codes.OK && !f.Hang && !f.NotReady {
		return fmt.Errorf("devplugin: fault for %s does nothing: set a code, hang or not_ready", method)
	}
	return nil
}

// methodNames are the methods a fault may name.
var methodNames = func() map[string]bool {
	m := map[string]bool{}
	for _, d := range []*grpc.ServiceDesc{&csi.Identity_ServiceDesc, &csi.Controller_ServiceDesc, &csi.Node_ServiceDesc, &csi.GroupController_ServiceDesc} {
		for _, md := range d.Methods {
			m[md.MethodName] = true
		}
	}
	return m
}()

// SetFault makes the instances on stateDir apply f to the calls of method
// (e.g. "NodeStageVolume"), replacing any fault it had.
func SetFault(stateDir, method string, f Fault) error {
	if err := f.validate(method); err != nil {
		return err
	}
	s := &store{dir: stateDir}
	unlock, err := s.lock(true)
	if err != nil {
		return err
	}
	defer unlock()
	faults, err := s.readFaults()
	if err != nil {
		return err
	}
	if faults == nil {
		faults = map[string]Fault{}
	}
	faults[method] = f
	return s.writeFaults(faults)
}

// Faults returns the faults set on stateDir, by method. A fault set for a
// number of calls is gone once that many calls have taken it, so a test
// can tell that a call has started (and, for a hang, is hanging).
func Faults(stateDir string) (map[string]Fault, error) {
	return (&store{dir: stateDir}).readFaults()
}

// ClearFaults removes every fault of stateDir.
func ClearFaults(stateDir string) error {
	s := &store{dir: stateDir}
	unlock, err := s.lock(true)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(s.path(faultsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("devplugin: clearing faults: %w", err)
	}
	return nil
}

func (s *store) readFaults() (map[string]Fault, error) {
	name := s.path(faultsFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("devplugin: reading faults: %w", err)
	}
	var faults map[string]Fault
	if err := json.Unmarshal(b, &faults); err != nil {
		return nil, fmt.Errorf("devplugin: faults file %s is invalid: %v", name, err)
	}
	for method, f := range faults {
		if err := f.validate(method); err != nil {
			return nil, fmt.Errorf("devplugin: faults file %s: %v", name, err)
		}
	}
	return faults, nil
}

func (s *store) writeFaults(faults map[string]Fault) error {
	b, err := json.MarshalIndent(faults, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.path(faultsFile), b)
}

// takeFault returns the fault to apply to one call of method, counting the
// call against the fault's times. The file is read without the lock first,
// so calls without faults never wait for it.
func (s *store) takeFault(method string) (Fault, bool, error) {
	faults, err := s.readFaults()
	if err != nil {
		return Fault{}, false, err
	}
	f, ok := faults[method]
	if !ok || f.Times == 0 {
		return f, ok, nil
	}
	unlock, err := s.lock(true)
	if err != nil {
		return Fault{}, false, err
	}
	defer unlock()
	// Another call (perhaps in another process) may have used the last
	// count since the first read.
	if faults, err = s.readFaults(); err != nil {
		return Fault{}, false, err
	}
	f, ok = faults[method]
	if !ok || f.Times == 0 {
		return f, ok, nil
	}
	if left := f.Times - 1; left == 0 {
		delete(faults, method)
	} else {
		g := f
		g.Times = left
		faults[method] = g
	}
	return f, true, s.writeFaults(faults)
}

// codeNames are the spec's names of the gRPC codes.
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return strconv.Itoa(int(c))
}

// parseCode reads a code by its spec name, its Go name or its number.
func parseCode(s string) (codes.Code, error) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < len(codeNames) {
		return codes.Code(n), nil
	}
	squashed := strings.ReplaceAll(s, "_", "")
	for i, name := range codeNames {
		c := codes.Code(i)
		if s == name || strings.EqualFold(squashed, c.String()) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown gRPC code %q", s)
}

// Package nomadcli runs the real Nomad CLI, pinned to one release, against
// volplane: a dev agent and a 3-server cluster. It is a module of its own
// so that neither Nomad nor its hundreds of dependencies reach volplane's
// go.mod; the Nomad CLI is built from its published Go module the first
// time and kept in the user's cache directory.
//
// Run it with: cd e2e/nomadcli && go test -race -count=1 ./...
package nomadcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

const (
	// NomadVersion is the Nomad release whose CLI is run.
	NomadVersion = "v1.10.5"
	// nomadModule is the Go module (and main package) of the Nomad CLI.
	nomadModule = "github.com/hashicorp/nomad"
	// nomadAPIVersion is the api module at the release's commit
	// (a3b86c697f38, tagged v1.10.5). Nomad's go.mod replaces the api module
	// with ./api, a path its module zip lacks (the api is a module of its
	// own), and a dependency's replace directives are ignored anyway: the
	// build requires the api as it was at the release instead.
	nomadAPIVersion = "v0.0.0-20250909143645-a3b86c697f38"
)

// buildGoMod is the module the Nomad CLI is built in. Nomad's own go.mod
// pins two modules with replace directives, which only a main module's
// go.mod can do: they are repeated here, the local ./api one excepted.
var buildGoMod = `module volplane.test/nomadcli-build

go 1.24.7

require (
	` + nomadModule + ` ` + NomadVersion + `
	` + nomadModule + `/api ` + nomadAPIVersion + `
)

replace (
	github.com/Microsoft/go-winio => github.com/endocrimes/go-winio v0.4.13-0.20190628114223-fb47a8b41948
	github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1
)
`

// UnavailableError says that the Nomad module cannot be had here: the
// module proxy refused it, or no proxy could be reached. Tests skip on it,
// since nothing in volplane is wrong; any other build failure fails them.
type UnavailableError struct {
	// Answer is what the go command reported, on one line.
	Answer string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the Nomad CLI %s cannot be built here: %s", NomadVersion, e.Answer)
}

// SkipLine is the one line a test skips with when the CLI cannot be had.
func (e *UnavailableError) SkipLine() string {
	return "nomadcli: skipped: " + e.Error()
}

// CachePath is where the built CLI is kept:
// $XDG_CACHE_HOME/volplane/nomad-<version>/nomad, or under ~/.cache.
func CachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "volplane", "nomad-"+NomadVersion, "nomad"), nil
}

// Builder builds the Nomad CLI into Path, once: a binary already there is
// used as it is.
type Builder struct {
	// Path is where the binary is kept (see CachePath).
	Path string
	// Env is added to the go command's environment (tests point GOPROXY at
	// a fake proxy with it).
	Env []string
}

// NomadBinary returns the cached Nomad CLI, building it first when the
// cache has none. A module that cannot be downloaded is an
// *UnavailableError.
func NomadBinary(ctx context.Context) (string, error) {
	path, err := CachePath()
	if err != nil {
		return "", err
	}
	return Builder{Path: path}.Binary(ctx)
}

// Binary returns b.Path, building the CLI there first when it is missing.
func (b Builder) Binary(ctx context.Context) (string, error) {
	if fi, err := os.Stat(b.Path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return b.Path, nil
	}
	if err := os.MkdirAll(filepath.Dir(b.Path), 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(filepath.Dir(b.Path), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte(buildGoMod), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(work, "nomad")
	// -mod=mod lets the build fill go.sum (and the indirect requirements)
	// from the modules it downloads; GOWORK=off keeps a go.work of the
	// caller's out of it.
	cmd := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-trimpath", "-o", out, nomadModule)
	cmd.Dir = work
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), b.Env...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return "", buildError(err, output.String())
	}
	// A rename within one directory is atomic: a concurrent run sees no
	// binary or a whole one.
	if err := os.Rename(out, b.Path); err != nil {
		return "", err
	}
	return b.Path, nil
}

// unavailable matches the go command's lines that say a module could not
// be downloaded at all: the proxy's refusal (with the answer it gave on
// the next line) or a network that does not reach it.
var (
	proxyRefusal = regexp.MustCompile(`(?m)^(?:go: )?(.*?reading https?://\S+: (?:403|404|410)\b[^\n]*)(?:\n\s+server response: ([^\n]+))?`)
	noNetwork    = regexp.MustCompile(`(?m)^(?:go: )?(.*?(?:dial tcp|lookup \S+)[^\n]*(?:no such host|connection refused|network is unreachable|i/o timeout)[^\n]*)`)
)

// buildError classes a failed build: a module that cannot be downloaded is
// an *UnavailableError quoting the go command's words; anything else (a
// compile error) is returned with the whole output.
func buildError(err error, output string) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("building the Nomad CLI %s: %w\n%s", NomadVersion, err, output)
	}
	if m := proxyRefusal.FindStringSubmatch(output); m != nil {
		answer := strings.TrimSpace(m[1])
		if resp := strings.TrimSpace(m[2]); resp != "" {
			answer += " (server response: " + resp + ")"
		}
		return &UnavailableError{Answer: "the module proxy refused it: " + answer}
	}
	if m := noNetwork.FindStringSubmatch(output); m != nil {
		return &UnavailableError{Answer: "no module proxy could be reached: " + strings.TrimSpace(m[1])}
	}
	return fmt.Errorf("building the Nomad CLI %s (go build %s): %w\n%s", NomadVersion, nomadModule, err, output)
}

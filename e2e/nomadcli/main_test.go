package nomadcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/e2e"
	"github.com/volplane/volplane/testutil"
)

// nomadBin is the Nomad CLI TestMain built (or found cached); nomadErr is
// why it could not, an *UnavailableError when the module cannot be had.
var (
	nomadBin string
	nomadErr error
)

// buildTimeout bounds the first build of the Nomad CLI: its module and
// dependencies are a few hundred MB to download and compile.
const buildTimeout = 45 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "volplane-nomadcli-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "nomadcli: %v\n", err)
		os.Exit(1)
	}
	e2e.UseVolplane(dir)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	nomadBin, nomadErr = NomadBinary(ctx)
	cancel()
	var unavailable *UnavailableError
	if errors.As(nomadErr, &unavailable) {
		// Said once here; each test that needs the CLI skips with it.
		fmt.Fprintln(os.Stderr, unavailable.SkipLine())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needNomad skips the test, with one line, when the Nomad CLI cannot be
// had here, and fails it when the build failed for another reason.
func needNomad(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("nomadcli: skipped with -short")
	}
	var unavailable *UnavailableError
	switch {
	case errors.As(nomadErr, &unavailable):
		t.Skip(unavailable.SkipLine())
	case nomadErr != nil:
		t.Fatalf("nomadcli: %v", nomadErr)
	}
	if _, err := e2e.VolplaneBinary(); err != nil {
		t.Fatalf("nomadcli: %v", err)
	}
}

// nomad runs the Nomad CLI against one agent.
type nomad struct {
	addr  string
	token string
	dir   string // the working directory: where the specs are written
}

// result is one run of the CLI.
type result struct {
	args   []string
	code   int
	output string
}

// panicked reports whether the CLI crashed, whatever its exit code.
func (r result) panicked() bool {
	return strings.Contains(r.output, "panic: ") || strings.Contains(r.output, "goroutine ") && strings.Contains(r.output, "[running]")
}

func (r result) String() string {
	return fmt.Sprintf("nomad %s: exit %d\n%s", strings.Join(r.args, " "), r.code, r.output)
}

// run runs `nomad args...` with NOMAD_ADDR (and NOMAD_TOKEN) set, and none
// of the caller's NOMAD_* or VOLPLANE_* variables.
func (n *nomad) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nomadBin, args...)
	cmd.Dir = n.dir
	cmd.Env = append(cleanEnv(), "NOMAD_ADDR="+n.addr)
	if n.token != "" {
		cmd.Env = append(cmd.Env, "NOMAD_TOKEN="+n.token)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := result{args: args, output: out.String()}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("nomad %s did not finish within 2 minutes\n%s", strings.Join(args, " "), res.output)
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("running nomad %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// ok runs the CLI and fails the test unless it exits 0 without a panic;
// it returns the output.
func (n *nomad) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := n.run(t, args...)
	if r.code != 0 || r.panicked() {
		t.Errorf("%s", r)
	}
	return r.output
}

// write writes a file into the CLI's working directory.
func (n *nomad) write(t *testing.T, name, content string) string {
	t.Helper()
	must.NoError(t, os.WriteFile(n.dir+"/"+name, []byte(content), 0o644))
	return name
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") && !strings.HasPrefix(kv, "VOLPLANE_") {
			env = append(env, kv)
		}
	}
	return env
}

// devAgentStarted is the line `volplane agent` prints once it serves.
var devAgentStarted = regexp.MustCompile(`volplane agent started: .*, HTTP (http://127\.0\.0\.1:[0-9]+)`)

// startDevAgent starts `volplane agent -dev` on free ports (with extra
// flags) and returns its HTTP address once it printed it. It is stopped
// when the test ends; on failure its output is shown.
func startDevAgent(t *testing.T, extra ...string) string {
	t.Helper()
	bin, err := e2e.VolplaneBinary()
	must.NoError(t, err)
	dataDir := t.TempDir()
	out := &testutil.Buffer{}
	args := append([]string{"agent", "-dev", "-http-port", "0", "-rpc-port", "0", "-data-dir", dataDir}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = out, out
	must.NoError(t, cmd.Start())
	var once sync.Once
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		once.Do(func() { close(done) })
	}()
	t.Cleanup(func() {
		// SIGTERM stops the tasks the agent started before it exits.
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("==== output of volplane agent -dev ====\n%s", out.String())
		}
	})
	var addr string
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		select {
		case <-done:
			t.Fatalf("volplane agent -dev exited while starting:\n%s", out.String())
		default:
		}
		m := devAgentStarted.FindStringSubmatch(out.String())
		if m == nil {
			return false, errors.New("the dev agent has not printed its address")
		}
		addr = m[1]
		return true, nil
	})
	return addr
}

// getJSON reads a path of the agent's API into v, for the IDs a test needs
// (an allocation's, a node's) without depending on the CLI's output.
func getJSON(t *testing.T, addr, token, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, addr+path, nil)
	must.NoError(t, err)
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	must.NoError(t, err)
	defer resp.Body.Close()
	must.Eq(t, http.StatusOK, resp.StatusCode, must.Sprintf("GET %s", path))
	must.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

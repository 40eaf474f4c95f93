package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// How the README marks its shell blocks for TestE2E_ReadmeExamples: an
// HTML comment on the line right before the fence.
//
//	<!-- readme-test: dev -->              run against the shared dev agent
//	<!-- readme-test: dev-acl -->          run against a dev agent with -acl-enabled
//	<!-- readme-test: skip <reason> -->    not run, for the reason given
//
// Every ```sh, ```shell and ```bash block must carry one, so that a new
// example is either run or skipped on purpose.
const (
	readmeDev    = "dev"
	readmeDevACL = "dev-acl"
	readmeSkip   = "skip"
)

var (
	readmeMarker = regexp.MustCompile(`^<!--\s*readme-test:\s*(\S+)\s*(.*?)\s*-->\s*$`)
	readmeFence  = regexp.MustCompile("^```(sh|shell|bash)\\s*$")
)

// readmeBlock is one shell block of the README.
type readmeBlock struct {
	line   int    // the line of its opening fence, from 1
	mode   string // readmeDev, readmeDevACL or readmeSkip
	reason string // why it is skipped
	script string
}

func (b readmeBlock) name() string { return fmt.Sprintf("README.md:%d", b.line) }

// readmeBlocks reads the shell blocks of a README and their markers. A
// block without a marker, a marker of an unknown mode, a skip without a
// reason or a marker before anything but a shell block is an error.
func readmeBlocks(text string) ([]readmeBlock, error) {
	var (
		blocks  []readmeBlock
		pending *readmeBlock // a marker waiting for its block
		cur     *readmeBlock // the block being read
		body    strings.Builder
		inOther bool // inside a fenced block of another language
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil:
			if strings.TrimSpace(line) == "```" {
				cur.script = body.String()
				blocks = append(blocks, *cur)
				cur = nil
				body.Reset()
				continue
			}
			body.WriteString(line + "\n")
		case inOther:
			inOther = strings.TrimSpace(line) != "```"
		case readmeFence.MatchString(line):
			if pending == nil {
				return nil, fmt.Errorf("README.md:%d: a shell block without a <!-- readme-test: dev|dev-acl|skip REASON --> line before it", n)
			}
			cur, pending = pending, nil
			cur.line = n
		case strings.HasPrefix(line, "```"):
			if pending != nil {
				return nil, fmt.Errorf("README.md:%d: a readme-test marker before a block that is not sh, shell or bash", n)
			}
			inOther = true
		default:
			if pending != nil {
				return nil, fmt.Errorf("README.md:%d: a readme-test marker must be right before its block's fence", n-1)
			}
			m := readmeMarker.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			b := readmeBlock{mode: m[1], reason: m[2]}
			switch {
			case b.mode != readmeDev && b.mode != readmeDevACL && b.mode != readmeSkip:
				return nil, fmt.Errorf("README.md:%d: unknown readme-test mode %q (dev, dev-acl or skip)", n, b.mode)
			case b.mode == readmeSkip && b.reason == "":
				return nil, fmt.Errorf("README.md:%d: readme-test: skip needs a reason", n)
			}
			pending = &b
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("README.md:%d: the block is not closed", cur.line)
	}
	if pending != nil {
		return nil, fmt.Errorf("a readme-test marker at the end of README.md has no block")
	}
	return blocks, nil
}

// defaultAddrUse finds the lines of a block run against a dev agent that
// would not follow VOLPLANE_ADDR: a fixed agent address or -address, or a
// curl that does not take its address from VOLPLANE_ADDR. The README's
// examples use the default address, so that variable must be the only
// thing that points them elsewhere.
func defaultAddrUse(script string) []string {
	var bad []string
	for _, line := range strings.Split(script, "\n") {
		code, _, _ := strings.Cut(line, " #")
		plain := strings.ReplaceAll(code, "${VOLPLANE_ADDR:-http://127.0.0.1:4646}", "$VOLPLANE_ADDR")
		switch {
		case regexp.MustCompile(`(localhost|127\.0\.0\.1):[0-9]+`).MatchString(plain),
			regexp.MustCompile(`(^|\s)--?address\b`).MatchString(plain),
			regexp.MustCompile(`(^|[\s;|(])curl\s`).MatchString(plain) && !strings.Contains(plain, "$VOLPLANE_ADDR"):
			bad = append(bad, strings.TrimSpace(line))
		}
	}
	return bad
}

// The README's marking is checked without agents (also under -short): every
// shell block is marked, and the marked ones follow VOLPLANE_ADDR.
func TestReadmeBlocks(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "README.md"))
	must.NoError(t, err)
	blocks, err := readmeBlocks(string(src))
	must.NoError(t, err)
	run := 0
	for _, b := range blocks {
		if b.mode == readmeSkip {
			continue
		}
		run++
		must.SliceEmpty(t, defaultAddrUse(b.script), must.Sprintf("%s: lines that ignore VOLPLANE_ADDR", b.name()))
	}
	must.Greater(t, 5, run, must.Sprint("the quick start's blocks are run"))
}

// The parser and the address check on small READMEs: what is accepted, and
// each mistake refused with its line.
func TestReadmeBlocks_Parse(t *testing.T) {
	blocks, err := readmeBlocks("# t\n\n<!-- readme-test: dev -->\n```sh\nvolplane node status\n```\n\n```hcl\n<!-- readme-test: dev -->\n```\n" +
		"<!-- readme-test: skip needs a cluster -->\n```bash\nx\ny\n```\n")
	must.NoError(t, err)
	must.Eq(t, []readmeBlock{
		{line: 4, mode: readmeDev, script: "volplane node status\n"},
		{line: 12, mode: readmeSkip, reason: "needs a cluster", script: "x\ny\n"},
	}, blocks)

	for text, want := range map[string]string{
		"a\n```sh\nx\n```\n":                                                    "README.md:2: a shell block without a <!-- readme-test",
		"<!-- readme-test: prod -->\n```sh\nx\n```\n":                           `README.md:1: unknown readme-test mode "prod"`,
		"<!-- readme-test: skip -->\n```sh\nx\n```\n":                           "README.md:1: readme-test: skip needs a reason",
		"<!-- readme-test: dev -->\n\n```sh\nx\n```\n":                          "README.md:1: a readme-test marker must be right before",
		"<!-- readme-test: dev -->\n```hcl\nx\n```\n":                           "README.md:2: a readme-test marker before a block that is not sh",
		"<!-- readme-test: dev -->\n```shell\nx\n":                              "README.md:2: the block is not closed",
		"<!-- readme-test: dev -->\n```sh\nx\n```\n<!-- readme-test: dev -->\n": "has no block",
	} {
		_, err := readmeBlocks(text)
		must.ErrorContains(t, err, want, must.Sprint(text))
	}

	must.Eq(t, []string{
		"curl -s localhost:4646/v1/volumes",
		"./volplane node status -address http://127.0.0.1:4646",
		`curl -s "http://example.com/x"`,
		"./volplane status --address=x",
	}, defaultAddrUse(`curl -s localhost:4646/v1/volumes
./volplane node status -address http://127.0.0.1:4646
curl -s "${VOLPLANE_ADDR:-http://127.0.0.1:4646}/v1/volumes"
curl -s "http://example.com/x"
./volplane status --address=x
./volplane volume status   # talks to 127.0.0.1:4646 unless VOLPLANE_ADDR says otherwise
`))
}

// TestE2E_ReadmeExamples runs the README's marked shell blocks, in order,
// as a reader runs them from the repository's root: each with bash -euo
// pipefail, the built volplane first on PATH (and as ./volplane),
// VOLPLANE_ADDR pointing at a dev agent on free ports. The blocks run in a
// directory of their own holding a copy of examples/, so that the files
// they write (vol0.hcl, volume.hcl, ...) do not land in the checkout.
// Blocks marked dev share one agent, so state carries from one to the next
// as in the walkthrough; dev-acl blocks get an agent with -acl-enabled.
func TestE2E_ReadmeExamples(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "README.md"))
	must.NoError(t, err)
	blocks, err := readmeBlocks(string(src))
	must.NoError(t, err)
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	if buildErr != nil {
		t.Fatalf("e2e: %v", buildErr)
	}

	work := t.TempDir()
	must.NoError(t, os.CopyFS(filepath.Join(work, "examples"), os.DirFS(filepath.Join("..", "examples"))))
	must.NoError(t, os.Symlink(volplaneBin, filepath.Join(work, "volplane")))
	path := filepath.Dir(volplaneBin) + string(os.PathListSeparator) + os.Getenv("PATH")

	agents := map[string]*devAgent{}
	agentFor := func(mode string) *devAgent {
		if a := agents[mode]; a != nil {
			return a
		}
		var extra []string
		if mode == readmeDevACL {
			extra = []string{"-acl-enabled"}
		}
		agents[mode] = startDevAgent(t, t.TempDir(), extra...)
		return agents[mode]
	}

	for _, b := range blocks {
		if b.mode == readmeSkip {
			t.Logf("%s: skipped: %s", b.name(), b.reason)
			continue
		}
		a := agentFor(b.mode)
		ok := t.Run(b.name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.script)
			cmd.Dir = work
			cmd.Env = append(cliEnv(), "VOLPLANE_ADDR="+a.HTTPAddr(), "PATH="+path)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (did not finish within 4 minutes)", err)
			}
			if err != nil {
				t.Fatalf("%s (against agent %s) failed: %v\n---- block ----\n%s---- output ----\n%s",
					b.name(), b.mode, err, b.script, out)
			}
		})
		if !ok {
			// The blocks build on each other: one that failed leaves the
			// next ones nothing sensible to run on.
			t.Fatalf("stopping at %s: the blocks after it build on it", b.name())
		}
	}
}

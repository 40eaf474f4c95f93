package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/testutil"
)

// The browser test drives Debian's Chromium with chromedp, over the
// DevTools protocol, from go test, rather than with Playwright from Node:
// it runs with the other end-to-end tests against the same `agent -dev`
// harness (the binary TestMain builds, ports the agent picks, its log shown
// on failure), waits with their helpers, is counted by go test like every
// other test, and needs no second test runner, no browser download and no
// Node at test time (Node only builds the bundle). chromedp is a test
// dependency only: nothing of it links into the binary. .ci/run installs
// Chromium; where it cannot be had, the test skips with one line.

// EnvChromium names the Chromium binary; unset, chromium is looked up on
// PATH, then /usr/bin/chromium.
const EnvChromium = "VOLPLANE_CHROMIUM"

// EnvScreenshots is the directory the screenshots of every page are
// written to; unset, ui-screenshots under the system's temp directory.
const EnvScreenshots = "VOLPLANE_UI_SCREENSHOTS"

// uiTimeout bounds each wait for the page to show something.
const uiTimeout = 30 * time.Second

func chromiumPath() string {
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// browser is a headless Chromium tab on a dev agent's UI.
type browser struct {
	t        *testing.T
	ctx      context.Context
	base     string
	shotsDir string
	errs     *testutil.Buffer
}

// newBrowser starts Chromium, or skips the test when it cannot be had.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromiumPath()
	if exe == "" {
		t.Skip("e2e browser test: skipped: Chromium is not installed (apt-get install chromium; .ci/run does)")
	}
	// The flags this machine's closed network needs: nothing in the
	// background reaches out, and a fresh profile each run.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(cancelCtx)
	b := &browser{t: t, ctx: ctx, errs: &testutil.Buffer{}}
	b.shotsDir = os.Getenv(EnvScreenshots)
	if b.shotsDir == "" {
		b.shotsDir = filepath.Join(os.TempDir(), "ui-screenshots")
	}
	must.NoError(t, os.MkdirAll(b.shotsDir, 0o755))
	if err := chromedp.Do(ctx); err != nil {
		t.Skipf("e2e browser test: skipped: Chromium at %s does not start: %v", exe, err)
	}
	// Script errors (a CSP violation among them) fail the test.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				fmt.Fprintf(b.errs, "%s\n", m)
			}
		}
	}()
	return b
}

// fail ends the test with what the page shows and the script errors.
func (b *browser) fail(what string, err error) {
	b.t.Helper()
	html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
	b.t.Fatalf("browser: %s: %v\npage:\n%s\nscript errors:\n%s", what, err, html, b.errs.String())
}

// do runs actions, bounded by uiTimeout.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

// eval runs a script in the page and returns its value.
func (b *browser) eval(what, expr string) any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// open loads a page of the UI by its fragment.
func (b *browser) open(fragment string) {
	b.t.Helper()
	b.do("opening "+fragment, chromedp.Navigate(b.base+"/ui/"+fragment))
}

// waitText waits until an element sel holds text.
func (b *browser) waitText(sel, text string) {
	b.t.Helper()
	js := fmt.Sprintf(`[...document.querySelectorAll(%q)].some(e => e.textContent.includes(%q))`, sel, text)
	b.waitJS(fmt.Sprintf("%s to show %q", sel, text), js)
}

// waitJS waits until the expression is true.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiTimeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(uiTimeout),
		chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		b.fail("waiting for "+what, err)
	}
}

// shot writes a full-page screenshot of the page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.fail("screenshot "+name, err)
	}
	path := filepath.Join(b.shotsDir, name+".png")
	must.NoError(b.t, os.WriteFile(path, png, 0o644))
	b.t.Logf("screenshot: %s", path)
}

func (b *browser) noScriptErrors() {
	b.t.Helper()
	must.Eq(b.t, "", b.errs.String(), must.Sprint("the UI raised script errors"))
}

// The web UI, in a real browser, against `agent -dev`: the volumes page
// lists a created volume; running the per_alloc example shows its claims;
// stopping the job from the UI shows the claims move to freed without a
// reload; the plugin page shows 1/1 healthy; the allocation page shows
// its task's events; a drain that waits for held claims shows on the
// nodes page and on the node's page with what is left on the node.
// A screenshot of each page is written (EnvScreenshots), at a laptop's
// width and a phone's.
func TestE2E_UI(t *testing.T) {
	// Chromium first: without it the test skips before starting anything.
	b := newBrowser(t)
	dataDir := t.TempDir()
	stateDir := filepath.Join(dataDir, "devplugin")
	a := startDevAgent(t, dataDir)
	b.base = a.httpAddr

	res := a.cli(t, "volume create", writeDevVolumeSpec(t, "database"))
	must.Zero(t, res.Code, must.Sprint(res))

	// The agent's root sends a browser to the UI, whose first page lists
	// the volumes.
	b.do("opening the agent's root", chromedp.Navigate(a.httpAddr+"/"))
	b.waitText("table caption", "Volumes in namespace default")
	b.waitText("table tbody td a", "database")
	b.shot("volumes")

	// Filters: a plugin with no volumes lists none.
	b.open("#/volumes?plugin=nope")
	b.waitText("table tbody td.empty", "No volumes")

	b.open("#/plugins")
	b.waitJS("plugin dev 1/1 healthy", `[...document.querySelectorAll('table tbody tr')].some(r =>
		r.cells[0].textContent === 'dev' && r.cells[3].textContent === '1/1' && r.cells[4].textContent === '1/1')`)
	b.shot("plugins")
	b.open("#/plugins/dev")
	b.waitJS("both instances healthy", `document.querySelectorAll('table tbody tr').length === 2 &&
		[...document.querySelectorAll('table tbody tr')].every(r => r.cells[2].textContent === 'healthy')`)
	b.shot("plugin")

	b.open("#/nodes")
	b.waitText("table tbody td", "ready")
	b.waitJS("the node eligible, not draining", `[...document.querySelectorAll('table[data-nodes] tbody tr')].some(r =>
		r.dataset.drain === 'false' && r.dataset.eligibility === 'eligible')`)
	b.shot("nodes")
	nodeHref, _ := b.eval("reading the node's link", `document.querySelector('table[data-nodes] tbody td a').getAttribute('href')`).(string)
	must.StrHasPrefix(t, "#/nodes/", nodeHref)

	// The per_alloc example: web.app[N] claims vol[N].
	for _, id := range []string{"vol[0]", "vol[1]", "vol[2]"} {
		res := a.cli(t, "volume create", writeDevVolumeSpec(t, id))
		must.Zero(t, res.Code, must.Sprint(res))
	}
	res = a.cli(t, "job run", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))

	b.open("#/jobs")
	b.waitText("table tbody td a", "web")
	b.shot("jobs")
	b.open("#/jobs/default/web")
	claims := `[...document.querySelectorAll('table[data-claims] tbody tr[data-state]')]`
	b.waitJS("three claims taken", claims+`.length === 3 && `+claims+`.every(r => r.dataset.state === 'taken')`)
	b.waitJS("three allocations running", `[...document.querySelectorAll('table tbody tr')].filter(r => r.textContent.includes('running')).length >= 3`)
	b.shot("job")

	b.open("#/volumes/default/vol%5B0%5D")
	b.waitText("table caption", "Claims on vol[0]")
	b.waitJS("the claim on vol[0]", claims+`.length === 1 && `+claims+`[0].dataset.state === 'taken'`)
	b.shot("volume")

	// An allocation: its volume's step, its task, the tail of its logs.
	allocHref, _ := b.eval("reading an allocation's link",
		`document.querySelector('table[data-claims] tbody tr td:nth-child(2) a').getAttribute('href')`).(string)
	must.StrHasPrefix(t, "#/allocations/", allocHref)
	b.open(allocHref)
	b.waitText("table tbody td", "published")
	b.waitText("table tbody td", "writer")
	b.waitText("pre.log", "wrote")
	// The task's recent events, the newest first: Started is there.
	b.waitJS("the task's Started event", `[...document.querySelectorAll('table[data-events="writer"] tbody tr')].some(r =>
		r.cells[1].textContent === 'Started' && r.cells[2].textContent === 'Task started by client' && /^\d{4}-\d\d-\d\dT/.test(r.cells[0].textContent))`)
	b.waitJS("both tails read", `[...document.querySelectorAll('pre.log')].length === 2 &&
		[...document.querySelectorAll('pre.log')].every(p => !p.textContent.includes('Loading'))`)
	b.shot("allocation")

	// Stop the job from the UI, confirming in the dialog: the claims move
	// to freed on the page as it is, without a reload.
	b.open("#/jobs/default/web")
	b.waitJS("three claims taken", claims+`.length === 3`)
	b.eval("marking the page", `window.__notReloaded = true`)
	b.do("asking to stop the job", chromedp.Click(chromedp.Search(`//button[text()="Stop job"]`)))
	b.waitJS("the confirmation dialog", `document.querySelector('dialog[open]') !== null`)
	b.shot("job-stop-confirm")
	b.do("confirming", chromedp.Click(chromedp.Search(`//dialog[@open]//button[text()="Yes, stop job"]`)))
	b.waitText("dialog[open] pre.result", "Job web stopped")
	b.do("closing the dialog", chromedp.Click(chromedp.Search(`//dialog[@open]//button[text()="Close"]`)))
	b.waitJS("every claim freed", claims+`.length === 3 && `+claims+`.every(r => r.dataset.state === 'freed')`)
	b.waitJS("the same page", `window.__notReloaded === true`)
	b.shot("job-stopped")

	// A drain of the node while the job runs again, with the node
	// plugin's unpublish failing so that the claims stay on the node: the
	// nodes page shows the node draining and ineligible, and the node's
	// page the drain and what is left on it, allocations and their claims,
	// as node status does. Once unpublish works again the claims are
	// freed and the page shows the drain complete, without a reload.
	must.NoError(t, devplugin.SetFault(stateDir, "NodeUnpublishVolume", devplugin.Fault{
		Code: codes.Unavailable, Message: "e2e: the storage node is busy",
	}))
	res = a.cli(t, "job run", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	b.open("#/jobs/default/web")
	b.waitJS("three claims taken again", claims+`.filter(r => r.dataset.state === 'taken').length === 3`)
	res = a.cli(t, "node drain", "-enable", "-yes", "-deadline", "5m", "-detach", strings.TrimPrefix(nodeHref, "#/nodes/"))
	must.Zero(t, res.Code, must.Sprint(res))
	b.open("#/nodes")
	b.waitJS("the node draining and ineligible", `[...document.querySelectorAll('table[data-nodes] tbody tr')].some(r =>
		r.dataset.drain === 'true' && r.dataset.eligibility === 'ineligible' && r.cells[5].textContent === 'draining')`)
	b.shot("nodes-draining")
	b.open(nodeHref)
	pair := func(label, prefix string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('dl.pairs dt')].some(dt =>
			dt.textContent === %q && dt.nextElementSibling.textContent.startsWith(%q))`, label, prefix)
	}
	b.waitJS("the drain with its deadline", pair("Drain", "true (started ")+` &&
		[...document.querySelectorAll('dl.pairs dd')].some(dd => dd.textContent.includes(', deadline 20'))`)
	left := `[...document.querySelectorAll('section[aria-label="Drain progress"] tbody tr')]`
	b.waitJS("three allocations left, each holding its volume", `document.querySelector('[data-drain-left="3"]') !== null &&
		document.querySelector('[data-drain-left]').textContent === '3 allocations and 3 volume claims left on the node' &&
		`+left+`.length === 3 && `+left+`.every(r => r.cells[3].textContent === 'stop' && /^vol\[\d\] \(/.test(r.cells[5].textContent))`)
	b.shot("node-draining")
	must.NoError(t, devplugin.ClearFaults(stateDir))
	b.waitJS("the drain complete", pair("Drain", "false")+` && `+pair("Last drain", "complete (started "))
	b.waitJS("no drain progress", `document.querySelector('section[aria-label="Drain progress"]') === null`)
	b.shot("node-drained")
	res = a.cli(t, "job stop", "-detach", "web")
	must.Zero(t, res.Code, must.Sprint(res))

	// The ACL token field keeps the token in local storage.
	b.do("entering a token",
		chromedp.SendKeys(chromedp.Search(`//label[contains(., "ACL token")]/input`), "not-a-real-token"),
		chromedp.Click(chromedp.Search(`//form[contains(@class, "token")]//button[@type="submit"]`)))
	b.waitJS("the token stored", `localStorage.getItem('volplane.token') === 'not-a-real-token'`)
	b.do("clearing the token", chromedp.Click(chromedp.Search(`//form[contains(@class, "token")]//button[text()="Clear"]`)))
	b.waitJS("the token cleared", `localStorage.getItem('volplane.token') === null`)

	// A phone's width: the same pages, readable.
	b.do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, p := range []struct{ fragment, name, text string }{
		{"#/volumes", "volumes-phone", "database"},
		{"#/jobs/default/web", "job-phone", "stopped"},
		{"#/plugins", "plugins-phone", "dev"},
		{"#/nodes", "nodes-phone", "ineligible"},
	} {
		b.open(p.fragment)
		b.waitText("main", p.text)
		b.waitJS("no page-wide horizontal scroll", `document.documentElement.scrollWidth <= window.innerWidth + 1`)
		b.shot(p.name)
	}
	b.noScriptErrors()
}

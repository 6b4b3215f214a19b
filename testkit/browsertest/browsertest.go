// Package browsertest drives Debian's chromium, headless, from Go tests over
// the DevTools protocol (chromedp). It is for tests only.
package browsertest

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path is the chromium binary, or "" when none is installed.
func Path() string {
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return ""
}

// shared is the test binary's one browser: starting chromium costs a few
// CPU-seconds, a tab a fraction of that. Each test's pages are on origins
// of their own (a server per test, on a port of its own), so their
// storage never meets.
var shared struct {
	sync.Mutex
	ctx    context.Context // the browser's first tab, which keeps it open
	cancel func()
}

// browser returns the shared browser's context, starting chromium when
// none runs.
func browser(t testing.TB) context.Context {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.ctx != nil && shared.ctx.Err() == nil {
		return shared.ctx
	}
	path := Path()
	if path == "" {
		t.Fatal("chromium not found: run `make chromium` (Debian package chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// The first action starts the browser, which lives as long as the
	// context of that call: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	shared.ctx, shared.cancel = ctx, func() { cancel(); cancelAlloc() }
	return ctx
}

// New opens a tab for the test in the test binary's headless chromium
// (started by the first test that asks) and returns a context to run
// chromedp actions in, which times out after 2 minutes; the tab closes at
// the test's end. Without chromium the test fails: `make chromium`
// installs it.
func New(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser(t))
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	return tctx
}

// Stop ends the shared browser, if one runs: for TestMain, after the
// tests and before looking for goroutines left running.
func Stop() {
	shared.Lock()
	defer shared.Unlock()
	if shared.cancel != nil {
		shared.cancel()
		shared.ctx, shared.cancel = nil, nil
	}
}

// Eval runs a JavaScript expression in the page and returns its value.
func Eval[T any](t testing.TB, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

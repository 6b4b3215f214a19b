package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-data/idem/internal/localpg"
)

// The object-store faults (Options.Files): the store the file datasets
// live in stopped, slowed down, or answering errors and cutting bodies.
const (
	// FaultObjectStoreDown stops versitygw (SIGTERM) for the hold (2 to
	// 14 s: some outlast a message's retry schedule), then starts it again
	// on the same port and data directory.
	FaultObjectStoreDown = "object_store_down"
	// FaultObjectStoreSlow adds Toxiproxy latency, both ways, on the link
	// between idem and the store.
	FaultObjectStoreSlow = "object_store_slow"
	// FaultObjectStore5xx makes the harness's HTTP proxy in front of the
	// store answer a share of requests (Param, in percent) with 503
	// SlowDown or 500 InternalError, and cut twice that share of the object
	// bodies it passes (at most all) mid-file.
	FaultObjectStore5xx = "object_store_5xx"
)

// objstoreKinds are the object-store faults.
var objstoreKinds = []string{FaultObjectStoreDown, FaultObjectStoreSlow, FaultObjectStore5xx}

// drawObjstore draws the hold and parameter of an object-store fault.
func drawObjstore(f *fault, rng *mrand.Rand) {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	switch f.Kind {
	case FaultObjectStoreDown:
		f.Hold = ms(2000, 14000)
	case FaultObjectStoreSlow:
		f.Hold, f.Param = ms(3000, 8000), 100+rng.IntN(1400)
	case FaultObjectStore5xx:
		// Longer than a watch's period, so that the loads of the
		// correction written as it starts read through it.
		f.Hold, f.Param = ms(5000, 10000), 10+rng.IntN(41)
	}
}

// objStore is the campaign's object store: a versitygw child process
// (restartable on the same port and data directory), the harness's error
// proxy in front of it, and a Toxiproxy link in front of that. idem
// reaches it through the link only: idem, the link, the error proxy,
// versitygw. The harness's own writes go to versitygw directly.
type objStore struct {
	bin       string
	dir       string // data and sidecar directories, and the logs
	logs      string
	port      int
	accessKey string
	secretKey string

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{}
	incarnation int

	errs *errProxy
	link *proxyLink // Toxiproxy, in front of errs
	// touch, when set, is called as a slow or failing store's fault
	// starts: the workload writes a correction then, so that loads read
	// through the fault (fileWorkload.run).
	touch func()
}

// direct is versitygw's own endpoint.
func (s *objStore) direct() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// endpoint is what idem is configured with: the Toxiproxy link.
func (s *objStore) endpoint() string { return "http://" + s.link.addr }

// startObjStore starts versitygw over dir, the error proxy and the link.
func startObjStore(ctx context.Context, bin, dir, logs string, seed int64) (*objStore, error) {
	s := &objStore{bin: bin, dir: dir, logs: logs, accessKey: "chaos-" + randHex(6), secretKey: randHex(20)}
	for _, d := range []string{"data", "meta"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	var err error
	for range 3 {
		if s.port, err = localpg.FreePort(); err != nil {
			return nil, err
		}
		if err = s.start(ctx); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	up, _ := url.Parse(s.direct())
	if s.errs, err = startErrProxy(up, seed); err != nil {
		s.close()
		return nil, err
	}
	if s.link, err = startLink(s.errs.addr); err != nil {
		s.close()
		return nil, fmt.Errorf("chaos: the object store's link: %w", err)
	}
	return s, nil
}

// start runs versitygw on s.port and waits until it answers HTTP.
func (s *objStore) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	s.incarnation++
	logf, err := os.Create(filepath.Join(s.logs, fmt.Sprintf("versitygw-%03d.log", s.incarnation)))
	if err != nil {
		return err
	}
	defer logf.Close()
	// An explicit loopback address: versitygw's default listens on every
	// interface.
	cmd := exec.Command(s.bin, "--port", "127.0.0.1:"+strconv.Itoa(s.port), "--quiet",
		"posix", "--sidecar", filepath.Join(s.dir, "meta"), filepath.Join(s.dir, "data"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.dir,
		"ROOT_ACCESS_KEY_ID=" + s.accessKey, "ROOT_SECRET_ACCESS_KEY=" + s.secretKey}
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start versitygw: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(s.direct() + "/")
		if err == nil {
			resp.Body.Close()
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("chaos: versitygw exited before answering on port %d (log %s)", s.port, logf.Name())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("chaos: versitygw did not answer on port %d within 30s (log %s)", s.port, logf.Name())
		}
	}
}

// stop stops versitygw with SIGTERM (SIGKILL after 5 s) and waits until it
// exited.
func (s *objStore) stop() { s.halt(syscall.SIGTERM, 5*time.Second) }

// kill SIGKILLs versitygw, as a site's power cut would, and waits until
// it exited.
func (s *objStore) kill() { s.halt(syscall.SIGKILL, 0) }

// halt sends sig to versitygw, SIGKILL if it has not exited within grace,
// and waits until it exited.
func (s *objStore) halt(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart starts versitygw again on the same port and data directory,
// retrying while the port is still being released.
func (s *objStore) restart(ctx context.Context) error {
	var err error
	for range 20 {
		if err = s.start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return err
}

func (s *objStore) touched() {
	if s.touch != nil {
		s.touch()
	}
}

func (s *objStore) close() {
	if s.link != nil {
		s.link.close()
	}
	if s.errs != nil {
		s.errs.close()
	}
	s.stop()
}

// injectObjstore runs one object-store fault.
func (n *nemesis) injectObjstore(ctx, heal context.Context, f *fault) error {
	s := n.store
	if s == nil {
		f.Skipped = "no object store (Options.Files is off)"
		return nil
	}
	switch f.Kind {
	case FaultObjectStoreDown:
		s.stop()
		down := time.Now()
		sleepCtx(ctx, f.Hold)
		rctx, cancel := context.WithTimeout(heal, time.Minute)
		defer cancel()
		err := s.restart(rctx)
		f.Outage = time.Since(down)
		return err
	case FaultObjectStoreSlow:
		attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Param, f.Param/2)
		remove, err := s.link.toxic("latency", attrs, "upstream", "downstream")
		if err != nil {
			return err
		}
		s.touched()
		sleepCtx(ctx, f.Hold)
		remove()
	case FaultObjectStore5xx:
		before := s.errs.counts()
		s.errs.set(f.Param, min(2*f.Param, 100))
		s.touched()
		sleepCtx(ctx, f.Hold)
		s.errs.set(0, 0)
		after := s.errs.counts()
		n.logf("chaos: %s: %d of %d requests answered with an error, %d bodies cut", f.Kind,
			after.errors-before.errors, after.requests-before.requests, after.cuts-before.cuts)
	}
	return nil
}

// errProxy is an HTTP reverse proxy in front of versitygw that, while its
// shares are set, answers a share of requests itself with the error
// bodies S3 sends (503 SlowDown, 500 InternalError), and cuts a share of
// the object bodies it passes: the headers and part of the body are sent,
// then the connection is closed. When versitygw does not answer at all,
// the client's connection is closed without a response.
type errProxy struct {
	ln   net.Listener
	srv  *http.Server
	addr string

	mu       sync.Mutex
	errShare int // percent of requests answered with an error
	cutShare int // percent of object bodies cut
	rng      *mrand.Rand

	nErrors, nCuts, nRequests atomic.Int64
}

// proxyCounts is what the proxy did so far.
type proxyCounts struct{ requests, errors, cuts int64 }

func (p *errProxy) counts() proxyCounts {
	return proxyCounts{p.nRequests.Load(), p.nErrors.Load(), p.nCuts.Load()}
}

// errCut is what a cut body's reader returns, which makes the proxy abort
// the response.
var errCut = errors.New("chaos: body cut mid-file")

func startErrProxy(upstream *url.URL, seed int64) (*errProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &errProxy{ln: ln, addr: ln.Addr().String(), rng: mrand.New(mrand.NewPCG(uint64(seed), 7))}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			// The client signed the Host it sent; the store checks it.
			r.Out.Host = r.In.Host
		},
		// Flush every write, so a cut body's first bytes reach the client
		// before the connection closes.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method != http.MethodGet || resp.ContentLength <= 0 ||
				(resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent) ||
				strings.Contains(resp.Request.URL.RawQuery, "list-type") || resp.Request.URL.Query().Has("location") {
				return nil
			}
			if keep, ok := p.cutAt(resp.ContentLength); ok {
				p.nCuts.Add(1)
				resp.Body = &cutBody{r: resp.Body, left: keep}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// No store behind: close the client's connection without a word.
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, herr := hj.Hijack(); herr == nil {
					_ = c.Close()
					return
				}
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: discardLog(),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.nRequests.Add(1)
		if code, ok := p.failNow(); ok {
			p.nErrors.Add(1)
			writeS3Error(w, r, code)
			return
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second, ErrorLog: discardLog()}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// set changes the shares, in percent; 0 and 0 turn the proxy transparent.
func (p *errProxy) set(errShare, cutShare int) {
	p.mu.Lock()
	p.errShare, p.cutShare = errShare, cutShare
	p.mu.Unlock()
}

// failNow draws whether this request is answered with an error, and which.
func (p *errProxy) failNow() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errShare <= 0 || p.rng.IntN(100) >= p.errShare {
		return 0, false
	}
	if p.rng.IntN(2) == 0 {
		return http.StatusServiceUnavailable, true
	}
	return http.StatusInternalServerError, true
}

// cutAt draws whether a body of size bytes is cut, and after how many.
func (p *errProxy) cutAt(size int64) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cutShare <= 0 || p.rng.IntN(100) >= p.cutShare {
		return 0, false
	}
	return p.rng.Int64N(size), true
}

func (p *errProxy) close() { _ = p.srv.Close() }

// writeS3Error answers as S3 does when it is overloaded (503 SlowDown) or
// failing (500 InternalError): an XML error body, and a request id.
func writeS3Error(w http.ResponseWriter, r *http.Request, code int) {
	s3code, msg := "InternalError", "We encountered an internal error. Please try again."
	if code == http.StatusServiceUnavailable {
		s3code, msg = "SlowDown", "Please reduce your request rate."
	}
	id := strings.ToUpper(randHex(8))
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", id)
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return
	}
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>%s</RequestId></Error>`,
		s3code, msg, r.URL.Path, id)
}

// cutBody passes left bytes of r, then fails.
type cutBody struct {
	r    io.ReadCloser
	left int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errCut
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cutBody) Close() error { return b.r.Close() }

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Package s3test gives tests a real S3 API: versitygw (Apache-2.0), its
// posix backend over a temporary directory, listening on a loopback port
// of its own and stopped when the test ends. No Docker, no fake: the
// server answers conditional reads, ranged reads and delimiter listings
// as an S3-compatible store does.
//
// The binary is built once per machine with `go install` from the Go
// module proxy into a cache outside the repository
// ($XDG_CACHE_HOME/idem-tools/versitygw-v1.8.0/bin, else ~/.cache/…), under
// a file lock so parallel test binaries build it once; the first build
// takes minutes. IDEM_VERSITYGW names a binary to use instead.
//
// It is for tests only and must never be imported by non-test code.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-data/idem/internal/localpg"
)

// The versitygw the rig runs.
const (
	Version = "v1.8.0"
	Module  = "github.com/versity/versitygw/cmd/versitygw"
	// EnvBinary names a versitygw binary to use instead of building one.
	EnvBinary = "IDEM_VERSITYGW"
)

// Region is the region the server signs for (versitygw's default).
const Region = "us-east-1"

// Server is one running versitygw.
type Server struct {
	// Endpoint is its base URL, http://127.0.0.1:PORT; buckets are
	// addressed path-style.
	Endpoint  string
	AccessKey string
	SecretKey string
	// Dir is the posix backend's root: bucket b's object k is the file
	// Dir/b/k. Files written there directly are objects too (their ETag is
	// empty: versitygw keeps ETags beside the file, in its sidecar).
	Dir string

	client *s3.Client
}

// Option changes how Start runs the server.
type Option func(*options)

type options struct {
	eventNATSURL, eventTopic string
}

// NATSEvents makes the server publish an S3 event notification (AWS's
// JSON, a Records list) on subject of the NATS server at url for every
// object written or deleted, after the request; and one test event at
// start. The NATS server must be running before Start.
func NATSEvents(url, subject string) Option {
	return func(o *options) { o.eventNATSURL, o.eventTopic = url, subject }
}

// Start runs a versitygw for t, stopped at t's end.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	bin := Binary(t)
	dir := t.TempDir()
	data, meta := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, meta} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{AccessKey: "idem-" + randomHex(t, 6), SecretKey: randomHex(t, 20), Dir: data}
	var lastErr error
	// A free port can be taken between finding it and versitygw binding it;
	// a server that exits before answering gets another.
	for attempt := 0; attempt < 3; attempt++ {
		port, err := localpg.FreePort()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		if lastErr = s.run(t, bin, dir, meta, port, o); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("s3test: versitygw did not start: %v", lastErr)
	}
	s.client = s3.New(s3.Options{
		Region:                     Region,
		BaseEndpoint:               aws.String(s.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	return s
}

// run starts versitygw on 127.0.0.1:port and waits until it answers HTTP.
func (s *Server) run(t testing.TB, bin, dir, meta string, port int, o options) error {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", port))
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Always an explicit loopback address: versitygw's default, :7070,
	// listens on every interface.
	args := []string{"--port", addr, "--quiet"}
	if o.eventNATSURL != "" {
		args = append(args, "--event-nats-url", o.eventNATSURL, "--event-nats-topic", o.eventTopic)
	}
	cmd := exec.Command(bin, append(args, "posix", "--sidecar", meta, s.Dir)...)
	// A clean environment: no VGW_* setting of the developer's leaks in.
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey,
	}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	endpoint := "http://" + addr
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := hc.Get(endpoint + "/"); err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("exited (%v) before answering on %s:\n%s", err, addr, out)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			stop(cmd, exited)
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("no answer on %s within 30s:\n%s", addr, out)
		}
	}
	s.Endpoint = endpoint
	t.Cleanup(func() { stop(cmd, exited) })
	return nil
}

// stop asks versitygw to stop, and kills it if it has not within 5s.
func stop(cmd *exec.Cmd, exited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Env points the standard AWS variables at s for the rest of t (so t and
// its parents must not be parallel).
func (s *Server) Env(t testing.TB) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", Region)
}

// Client is an S3 client of s's root user, for tests to do what the
// helpers don't.
func (s *Server) Client() *s3.Client { return s.client }

// CreateBucket creates bucket.
func (s *Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	if _, err := s.client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", bucket, err)
	}
}

// Put writes body at bucket/key and returns its ETag.
func (s *Server) Put(t testing.TB, bucket, key string, body []byte) string {
	t.Helper()
	return s.put(t, bucket, key, bytes.NewReader(body))
}

// PutFile uploads the local file path to bucket/key and returns its ETag.
func (s *Server) PutFile(t testing.TB, bucket, key, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return s.put(t, bucket, key, f)
}

func (s *Server) put(t testing.TB, bucket, key string, body io.ReadSeeker) string {
	t.Helper()
	out, err := s.client.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: body,
	})
	if err != nil {
		t.Fatalf("s3test: put %s/%s: %v", bucket, key, err)
	}
	return aws.ToString(out.ETag)
}

// Delete removes bucket/key.
func (s *Server) Delete(t testing.TB, bucket, key string) {
	t.Helper()
	if _, err := s.client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatalf("s3test: delete %s/%s: %v", bucket, key, err)
	}
}

var buildMu sync.Mutex

// Binary returns the path of versitygw Version, building it on first use
// (see the package documentation).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		return p
	}
	dir, err := toolsDir()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	bin := filepath.Join(dir, "bin", "versitygw")
	if isExecutable(bin) {
		return bin
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	defer unlock()
	if isExecutable(bin) { // another process built it while we waited
		return bin
	}
	t.Logf("s3test: building versitygw %s into %s (once; it takes minutes)", Version, dir)
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(goCommand(), "install", Module+"@"+Version)
	cmd.Dir = tmp // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("s3test: go install %s@%s: %v\n%s", Module, Version, err, tail(out, 4000))
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), bin); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return bin
}

// toolsDir is the cache folder of this version of versitygw.
func toolsDir() (string, error) {
	base, err := os.UserCacheDir() // $XDG_CACHE_HOME, else ~/.cache
	if err != nil {
		return "", fmt.Errorf("no cache directory for the versitygw build: %w", err)
	}
	return filepath.Join(base, "idem-tools", "versitygw-"+Version), nil
}

func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// lockFile takes an exclusive flock on path, blocking until it has it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

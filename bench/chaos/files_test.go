package chaos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/testkit/s3test"
)

// objstoreShortSeed is TestChaosObjectStoreShort's seed, one whose
// schedule holds at least two faults of each object-store kind, one
// object_store_down longer than the retry schedule among them
// (TestObjectStoreShortScheduleHasEveryKind); CHAOS_SEED overrides it.
const objstoreShortSeed = 20261301

var objstoreShortOptions = Options{Seed: objstoreShortSeed, Files: true, Kinds: objstoreKinds, LongRounds: -1,
	Duration: 50 * time.Second, Events: 300, Partitions: 10, Replicas: 2, FaultGapMin: 500 * time.Millisecond, FaultGapMax: 2 * time.Second}

// TestChaosObjectStoreShort is the focused campaign of the object-store
// faults: the file datasets (one per format, watched, partitions landing
// and corrected during the phase) beside the SQL ones, and only
// object_store_down, object_store_slow and object_store_5xx for 50 s. Every
// file partition must end equal to its files with no file version loaded
// twice and no event dead-lettered, and the SQL datasets keep every
// guarantee of the other campaigns.
func TestChaosObjectStoreShort(t *testing.T) {
	focused(t)
	r := runCampaign(t, objstoreShortOptions)
	if r == nil {
		return
	}
	if os.Getenv("CHAOS_SEED") == "" {
		requireFaults(t, r, objstoreKinds...)
		// Each object_store_5xx writes a correction as it starts, so its
		// loads read through the proxy: some bodies must have been cut.
		if r.Files != nil && (r.Files.ProxyErrors == 0 || r.Files.ProxyCuts == 0) {
			t.Errorf("the error proxy answered %d errors and cut %d bodies: the 5xx faults met no read", r.Files.ProxyErrors, r.Files.ProxyCuts)
		}
	}
	if r.Files == nil || r.Files.Loads == 0 {
		t.Errorf("no file partition loaded: the campaign proves nothing about files")
	}
	if r.Files != nil && r.Files.Corrections == 0 {
		t.Errorf("no file corrected during the phase: the watches were not tested on changes")
	}
}

// TestObjectStoreShortScheduleHasEveryKind: the focused campaign's seed
// draws each object-store fault at least twice within the phase, and one
// object_store_down longer than the retry schedule.
func TestObjectStoreShortScheduleHasEveryKind(t *testing.T) {
	o := objstoreShortOptions.WithDefaults()
	n := map[string]int{}
	long := 0
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		// Planned to end 8 s before the phase does: a slow heal must not
		// push one out of it.
		if f.At+f.Hold < o.Duration-8*time.Second {
			n[f.Kind]++
			if f.Kind == FaultObjectStoreDown && f.Hold > retrySchedule(Retries, RetryDelay, MaxRetryDelay) {
				long++
			}
		}
	}
	for _, k := range objstoreKinds {
		if n[k] < 2 {
			t.Errorf("%s drawn %d times in the phase; want at least 2 (%v)", k, n[k], n)
		}
	}
	if long == 0 {
		t.Errorf("no object_store_down outlasts the retry schedule: the campaign would not prove that idem waits")
	}
}

// TestObjectStoreErrProxy checks the error proxy against a real
// versitygw: transparent when off; while on, S3's own error bodies (which
// the SDK reads as SlowDown and InternalError), and object bodies cut
// mid-file that idem's S3 reader reports as an error, never as a shorter
// file.
func TestObjectStoreErrProxy(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "lake")
	body := bytes.Repeat([]byte("0123456789abcdef\n"), 4096) // 68 KiB
	etag := srv.Put(t, "lake", "dt=2026-01-01/part-000.csv", body)
	up, _ := url.Parse(srv.Endpoint)
	p, err := startErrProxy(up, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ctx := context.Background()
	client := s3.New(s3.Options{
		Region: s3test.Region, BaseEndpoint: aws.String("http://" + p.addr), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           1,
	})
	get := func() ([]byte, error) {
		out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("lake"), Key: aws.String("dt=2026-01-01/part-000.csv")})
		if err != nil {
			return nil, err
		}
		defer out.Body.Close()
		return io.ReadAll(out.Body)
	}

	// Off: transparent, signatures and all.
	if b, err := get(); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("through the idle proxy: %d bytes, %v; want the object", len(b), err)
	}

	// Every request answered with an S3 error.
	p.set(100, 0)
	seen := map[string]bool{}
	for range 20 {
		_, err := get()
		var api smithy.APIError
		if !errors.As(err, &api) {
			t.Fatalf("want an S3 API error, got %v", err)
		}
		var status interface{ HTTPStatusCode() int }
		if !errors.As(err, &status) {
			t.Fatalf("no HTTP status in %v", err)
		}
		switch {
		case api.ErrorCode() == "SlowDown" && status.HTTPStatusCode() == http.StatusServiceUnavailable,
			api.ErrorCode() == "InternalError" && status.HTTPStatusCode() == http.StatusInternalServerError:
			seen[api.ErrorCode()] = true
		default:
			t.Fatalf("unexpected error %s %d: %v", api.ErrorCode(), status.HTTPStatusCode(), err)
		}
	}
	if !seen["SlowDown"] || !seen["InternalError"] {
		t.Errorf("20 errors gave only %v", seen)
	}

	// Every body cut: the SDK sees a body shorter than its Content-Length,
	// and idem's reader fails rather than hand over part of the file.
	p.set(0, 100)
	b, err := get()
	if err == nil || len(b) >= len(body) {
		t.Fatalf("a cut body read %d of %d bytes with error %v; want an error and fewer bytes", len(b), len(body), err)
	}
	srv.Env(t)
	store, err := files.NewS3("lake", files.S3Options{Endpoint: "http://" + p.addr, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		f := files.File{Key: "dt=2026-01-01/part-000.csv", URL: "s3://lake/dt=2026-01-01/part-000.csv", Size: int64(len(body)), ETag: etag}
		rc, err := store.Open(ctx, &f)
		if err != nil {
			t.Fatalf("open through the cutting proxy: %v", err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err == nil {
			t.Fatalf("idem's reader returned %d of %d bytes without an error", len(got), len(body))
		}
	}
	c := p.counts()
	if c.errors != 20 || c.cuts != 6 {
		t.Errorf("counts %+v; want 20 errors and 6 cuts", c)
	}

	// Off again: transparent.
	p.set(0, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := get()
		if err == nil && bytes.Equal(b, body) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the fault: %d bytes, %v", len(b), err)
		}
	}
}

// TestObjStoreRestartsOnItsPort checks object_store_down's mechanism: the
// store stopped answers nothing through idem's endpoint, and started
// again it serves the same objects on the same port, through the link and
// the error proxy.
func TestObjStoreRestartsOnItsPort(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := startObjStore(ctx, s3test.Binary(t), dir, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	client := func(endpoint string) *s3.Client {
		return s3.New(s3.Options{
			Region: s3test.Region, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
			Credentials:                credentials.NewStaticCredentialsProvider(s.accessKey, s.secretKey, ""),
			RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
			ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
			RetryMaxAttempts:           1,
		})
	}
	direct, idem := client(s.direct()), client(s.endpoint())
	if _, err := direct.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lake")}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lake"), Key: aws.String("k"), Body: bytes.NewReader([]byte("v1"))}); err != nil {
		t.Fatal(err)
	}
	get := func() (string, error) {
		out, err := idem.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("lake"), Key: aws.String("k")})
		if err != nil {
			return "", err
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		return string(b), err
	}
	if v, err := get(); err != nil || v != "v1" {
		t.Fatalf("before: %q, %v", v, err)
	}
	port := s.port
	s.stop()
	if v, err := get(); err == nil {
		t.Fatalf("a stopped store answered %q", v)
	}
	if err := s.restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.port != port {
		t.Fatalf("restarted on port %d, not %d", s.port, port)
	}
	if v, err := get(); err != nil || v != "v1" {
		t.Fatalf("after the restart: %q, %v", v, err)
	}
}

// TestObjectStoreKindsNeedFiles: a campaign drawing object-store faults
// without the file datasets, or with them and no versitygw, is refused.
func TestObjectStoreKindsNeedFiles(t *testing.T) {
	o := Options{Bin: "idem", PG: &localpg.Server{}, Dir: t.TempDir(), Kinds: []string{FaultObjectStore5xx}}.WithDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "need Files") {
		t.Errorf("object-store kinds without Files: %v", err)
	}
	o.Files = true
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "S3Bin is required") {
		t.Errorf("Files without S3Bin: %v", err)
	}
	o.S3Bin = "versitygw"
	if err := o.Validate(); err != nil {
		t.Errorf("Files with S3Bin: %v", err)
	}
}

package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// RegionDefault is S3Options.Region when it is empty.
const RegionDefault = "us-east-1"

// The environment variables credentials come from, and only from: no
// shared config file, no instance metadata, nothing that could pick up
// another identity than the one the operator set for idem.
const (
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN" // optional
)

// S3Options says how to reach an S3 API: AWS itself, or an S3-compatible
// store. Credentials are not here: they come from the environment (see
// EnvAccessKeyID), so no configuration file holds them.
type S3Options struct {
	// Endpoint is the base URL of an S3-compatible store,
	// e.g. http://127.0.0.1:7070; empty for AWS.
	Endpoint string
	// Region signs requests; RegionDefault when empty.
	Region string
	// PathStyle addresses buckets as endpoint/bucket/key instead of
	// bucket.endpoint/key, as most S3-compatible stores want.
	PathStyle bool
}

// WithDefaults returns o with the documented defaults filled in.
func (o S3Options) WithDefaults() S3Options {
	if o.Region == "" {
		o.Region = RegionDefault
	}
	return o
}

// Validate checks o on its own.
func (o S3Options) Validate() error {
	if o.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(o.Endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("s3.endpoint: not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("s3.endpoint: %q: want http://host:port or https://host", u.Redacted())
	case u.User != nil:
		return errors.New("s3.endpoint: holds credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("s3.endpoint: %q: no query or fragment", u.Redacted())
	}
	return nil
}

// S3 is a Store over one bucket of an S3 API.
//
// Reads send If-Match with the ETag the listing gave, so an object
// replaced after the listing answers 412, a *ChangedError. Request and
// response checksums are computed only when an operation requires them:
// the SDK's default CRC checksums (since service/s3 v1.73.0) are refused
// by many S3-compatible stores.
type S3 struct {
	bucket   string
	endpoint string
	client   *s3.Client
	secrets  []string // what error texts must never show
}

var _ Store = (*S3)(nil)

// NewS3 returns a Store over bucket, with credentials from the environment.
func NewS3(bucket string, opts S3Options) (*S3, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if bucket == "" {
		return nil, errors.New("s3 store: no bucket")
	}
	id, secret, token := os.Getenv(EnvAccessKeyID), os.Getenv(EnvSecretAccessKey), os.Getenv(EnvSessionToken)
	if id == "" || secret == "" {
		return nil, fmt.Errorf("s3 store for s3://%s: set %s and %s in idem's environment", bucket, EnvAccessKeyID, EnvSecretAccessKey)
	}
	o := s3.Options{
		Region:                     opts.Region,
		Credentials:                aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, token)),
		UsePathStyle:               opts.PathStyle,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if opts.Endpoint != "" {
		o.BaseEndpoint = aws.String(opts.Endpoint)
	}
	s := &S3{bucket: bucket, endpoint: opts.Endpoint, client: s3.New(o)}
	for _, v := range []string{id, secret, token} {
		if v != "" {
			s.secrets = append(s.secrets, v)
		}
	}
	return s, nil
}

// URL returns s3://bucket/key.
func (s *S3) URL(key string) string { return "s3://" + s.bucket + "/" + key }

// String names the bucket and the endpoint, never the credentials.
func (s *S3) String() string {
	if s.endpoint == "" {
		return s.URL("")
	}
	return s.URL("") + " at " + s.endpoint
}

// List lists prefix with the "/" delimiter: the objects directly under it
// and its sub-prefixes, never the objects below those.
func (s *S3) List(ctx context.Context, prefix string) (Dir, error) {
	var out Dir
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket:    aws.String(s.bucket),
		Prefix:    aws.String(prefix),
		Delimiter: aws.String("/"),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return Dir{}, s.fail("list", prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if key == prefix || !strings.HasPrefix(key, prefix) || strings.Contains(key[len(prefix):], "/") {
				continue // the "directory" object some tools write, or a store ignoring the delimiter
			}
			out.Files = append(out.Files, File{
				Key: key, URL: s.URL(key), Size: aws.ToInt64(o.Size),
				ETag: aws.ToString(o.ETag), ModTime: aws.ToTime(o.LastModified),
			})
		}
		for _, cp := range page.CommonPrefixes {
			out.Prefixes = append(out.Prefixes, aws.ToString(cp.Prefix))
		}
	}
	return out, nil
}

// Stat sends a HEAD.
func (s *S3) Stat(ctx context.Context, key string) (File, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return File{}, s.fail("head", key, err)
	}
	return File{
		Key: key, URL: s.URL(key), Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		VersionID: aws.ToString(out.VersionId), ModTime: aws.ToTime(out.LastModified),
	}, nil
}

// Get reads a small object whole.
func (s *S3) Get(ctx context.Context, key string, limit int64) ([]byte, File, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return nil, File{}, s.fail("get", key, err)
	}
	defer out.Body.Close()
	f := File{
		Key: key, URL: s.URL(key), Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		VersionID: aws.ToString(out.VersionId), ModTime: aws.ToTime(out.LastModified),
	}
	if f.Size > limit {
		return nil, File{}, fmt.Errorf("%s: %d bytes, more than the %d a marker or manifest may have", f.URL, f.Size, limit)
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, limit+1))
	if err != nil {
		return nil, File{}, s.fail("get", key, err)
	}
	if int64(len(b)) != f.Size {
		return nil, File{}, fmt.Errorf("%s: read %d bytes of %d", f.URL, len(b), f.Size)
	}
	return b, f, nil
}

// Open streams f with If-Match: its listed ETag.
func (s *S3) Open(ctx context.Context, f *File) (io.ReadCloser, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(f.Key)}
	if f.ETag != "" {
		in.IfMatch = aws.String(f.ETag)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		return nil, s.failRead(f, err)
	}
	f.VersionID = aws.ToString(out.VersionId)
	if n := aws.ToInt64(out.ContentLength); n != f.Size {
		out.Body.Close()
		return nil, &ChangedError{URL: f.URL, Listed: fmt.Sprintf("%s, %d bytes", f.identity(), f.Size), Found: fmt.Sprintf("%d bytes", n)}
	}
	return &s3Reader{s: s, f: f, body: out.Body}, nil
}

type s3Reader struct {
	s    *S3
	f    *File
	body io.ReadCloser
	n    int64
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.n += int64(n)
	switch {
	case err == io.EOF && r.n != r.f.Size:
		return n, &ChangedError{URL: r.f.URL, Listed: fmt.Sprintf("%d bytes", r.f.Size), Found: fmt.Sprintf("%d bytes read", r.n)}
	case err != nil && err != io.EOF:
		return n, r.s.fail("read", r.f.Key, err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.body.Close() }

// OpenAt gives random access to f: each ReadAt is one ranged GET with
// If-Match, so reading a Parquet file never holds more of it than its
// reader asks for. The ReaderAt uses ctx for every request.
func (s *S3) OpenAt(ctx context.Context, f *File) (ReaderAt, error) {
	return &s3ReaderAt{ctx: ctx, s: s, f: f}, nil
}

type s3ReaderAt struct {
	ctx context.Context
	s   *S3
	f   *File
}

func (r *s3ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.f.Size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), r.f.Size)
	in := &s3.GetObjectInput{
		Bucket: aws.String(r.s.bucket), Key: aws.String(r.f.Key),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, end-1)),
	}
	if r.f.ETag != "" {
		in.IfMatch = aws.String(r.f.ETag)
	}
	out, err := r.s.client.GetObject(r.ctx, in)
	if err != nil {
		return 0, r.s.failRead(r.f, err)
	}
	defer out.Body.Close()
	if v := aws.ToString(out.VersionId); v != "" {
		r.f.VersionID = v
	}
	if total, ok := rangeTotal(aws.ToString(out.ContentRange)); ok && total != r.f.Size {
		// A store that moves new data into place before its new ETag
		// (versitygw) passes If-Match for a moment with the new bytes:
		// the object's size, which the range answer carries, tells.
		return 0, &ChangedError{URL: r.f.URL, Listed: fmt.Sprintf("%s, %d bytes", r.f.identity(), r.f.Size), Found: fmt.Sprintf("%d bytes", total)}
	}
	n, err := io.ReadFull(out.Body, p[:end-off])
	if err != nil {
		return n, r.s.fail("read", r.f.Key, err)
	}
	if end-off < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

func (r *s3ReaderAt) Close() error { return nil }

// rangeTotal is the object's size in a Content-Range answer
// ("bytes 0-99/5900"); ok is false when there is none or it is unknown.
func rangeTotal(cr string) (total int64, ok bool) {
	i := strings.LastIndexByte(cr, '/')
	if !strings.HasPrefix(cr, "bytes ") || i < 0 {
		return 0, false
	}
	total, err := strconv.ParseInt(cr[i+1:], 10, 64)
	return total, err == nil
}

// failRead is fail, with 412 and 404 on a listed file read as a change.
func (s *S3) failRead(f *File, err error) error {
	switch statusOf(err) {
	case 412:
		return &ChangedError{URL: f.URL, Listed: f.identity(), Found: "If-Match precondition failed (412)"}
	case 404:
		return &ChangedError{URL: f.URL, Listed: f.identity(), Found: "no object (404)"}
	}
	return s.fail("get", f.Key, err)
}

// fail wraps an SDK error with the operation and the object, and with
// ErrNotFound for a 404, behind a text that never shows the credentials.
func (s *S3) fail(op, key string, err error) error {
	e := &s3Error{op: op, url: s.URL(key), err: err, secrets: s.secrets}
	if statusOf(err) == 404 {
		e.notFound = true
	}
	return e
}

// StoreUnavailable reports whether err is the store failing to serve a
// request: an answer of 5xx or 429 (SlowDown), or none at all (refused,
// cut or timed out). That is the store's trouble, not the files' and not
// a setting's: a 403 or a 404 is not one.
func StoreUnavailable(err error) bool {
	var se *s3Error
	if !errors.As(err, &se) || se.notFound {
		return false
	}
	st := statusOf(se.err)
	return st == 0 || st == 429 || st >= 500
}

func statusOf(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

type s3Error struct {
	op, url  string
	err      error
	secrets  []string
	notFound bool
}

func (e *s3Error) Error() string {
	msg := e.err.Error()
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	if e.notFound {
		return fmt.Sprintf("s3 %s %s: %s: %s", e.op, e.url, ErrNotFound, msg)
	}
	return fmt.Sprintf("s3 %s %s: %s", e.op, e.url, msg)
}

// Unwrap gives ErrNotFound for a 404, and the SDK's error unless it wraps
// io.EOF: that one is a connection the store closed without an answer
// ("request send failed, ...: EOF", what a proxy in front of a stopped
// store does), and the readers that stop at io.EOF (a Parquet footer's or
// page's, a CSV line's) must never take it for the end of a file. Its
// text stays; StoreUnavailable and Timeout look at e.err itself.
func (e *s3Error) Unwrap() []error {
	err := e.err
	if errors.Is(err, io.EOF) {
		err = errConnectionClosed
	}
	if e.notFound {
		return []error{ErrNotFound, err}
	}
	return []error{err}
}

// errConnectionClosed is what an *s3Error whose SDK error wraps io.EOF
// unwraps to.
var errConnectionClosed = errors.New("the store closed the connection")

// Timeout lets callers that classify by behaviour see a deadline.
func (e *s3Error) Timeout() bool {
	return errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, os.ErrDeadlineExceeded)
}

package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/testkit/pgtest"
	"github.com/idem-data/idem/testkit/s3test"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is one kind of store with a way to put files in it, so a test
// runs the same steps against local disk and a real S3 API.
type backend struct {
	name  string
	store Store
	// base is the URL of the store's root, ending in "/": a Spec.URL is
	// base + a template.
	base string
	put  func(t *testing.T, key string, body []byte)
	del  func(t *testing.T, key string)
	// touch sets a file's modification time (local only; nil for S3).
	touch func(t *testing.T, key string, at time.Time)
	// s3 is the server behind an S3 backend, nil for local.
	s3 *s3test.Server
}

const bucket = "lake"

// backends returns a local and an S3 backend, fresh for t. The S3 one sets
// the AWS_* variables for t, so t must not be parallel.
func backends(t *testing.T) []backend {
	return []backend{localBackend(t), s3Backend(t)}
}

func localBackend(t *testing.T) backend {
	dir := t.TempDir()
	store, err := NewLocal(dir)
	require.NoError(t, err)
	return backend{
		name: "local", store: store, base: "file://" + filepath.ToSlash(dir) + "/",
		put: func(t *testing.T, key string, body []byte) {
			p := filepath.Join(dir, filepath.FromSlash(key))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, body, 0o644))
		},
		del: func(t *testing.T, key string) {
			require.NoError(t, os.Remove(filepath.Join(dir, filepath.FromSlash(key))))
		},
		touch: func(t *testing.T, key string, at time.Time) {
			require.NoError(t, os.Chtimes(filepath.Join(dir, filepath.FromSlash(key)), at, at))
		},
	}
}

func s3Backend(t *testing.T) backend {
	srv := s3test.Start(t)
	srv.CreateBucket(t, bucket)
	srv.Env(t)
	store, err := NewS3(bucket, S3Options{Endpoint: srv.Endpoint, PathStyle: true})
	require.NoError(t, err)
	return backend{
		name: "s3", store: store, base: "s3://" + bucket + "/", s3: srv,
		put: func(t *testing.T, key string, body []byte) { srv.Put(t, bucket, key, body) },
		del: func(t *testing.T, key string) { srv.Delete(t, bucket, key) },
	}
}

// storeFor builds the store a spec names, as the service would, for the
// backend b (whose S3 endpoint the spec cannot carry).
func (b backend) storeFor(t *testing.T, spec Spec) Store {
	t.Helper()
	var opts S3Options
	if b.s3 != nil {
		opts = S3Options{Endpoint: b.s3.Endpoint, PathStyle: true}
	}
	s, err := NewStore(spec, opts)
	require.NoError(t, err)
	return s
}

func day(t *testing.T, key string) schemas.Partition {
	t.Helper()
	p, err := schemas.ParsePartition(schemas.PartitionDate, key)
	require.NoError(t, err)
	return p
}

// ready resolves the partition and waits for nothing: it returns the
// readiness the rule gives now.
func ready(t *testing.T, store Store, spec Spec, partition string, now time.Time) (Readiness, error) {
	t.Helper()
	prefix, err := Resolve(spec, day(t, partition))
	require.NoError(t, err)
	return Ready(context.Background(), store, spec, prefix, now)
}

func keys(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Key
	}
	return out
}

func urls(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.URL
	}
	return out
}

// lines builds a file body from lines, each ended by "\n".
func lines(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

package s3test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
)

func TestServer(t *testing.T) {
	s := Start(t)
	u, err := url.Parse(s.Endpoint)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname(), "loopback only")

	s.CreateBucket(t, "bkt")
	etag := s.Put(t, "bkt", "dt=2026-11-28/part-0.csv", []byte("id\n1\n"))
	require.NotEmpty(t, etag)

	// The posix backend keeps the object as a plain file.
	body, err := os.ReadFile(filepath.Join(s.Dir, "bkt", "dt=2026-11-28", "part-0.csv"))
	require.NoError(t, err)
	require.Equal(t, "id\n1\n", string(body))

	// Conditional reads: the listed ETag matches, another does not (412).
	ctx := context.Background()
	get := func(ifMatch string) error {
		out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dt=2026-11-28/part-0.csv"), IfMatch: aws.String(ifMatch)})
		if err == nil {
			out.Body.Close()
		}
		return err
	}
	require.NoError(t, get(etag))
	require.ErrorContains(t, get(`"0000"`), "412")

	s.Delete(t, "bkt", "dt=2026-11-28/part-0.csv")
	_, err = os.Stat(filepath.Join(s.Dir, "bkt", "dt=2026-11-28", "part-0.csv"))
	require.ErrorIs(t, err, os.ErrNotExist)

	t.Run("env", func(t *testing.T) {
		s.Env(t)
		require.Equal(t, s.AccessKey, os.Getenv("AWS_ACCESS_KEY_ID"))
		require.Equal(t, s.SecretKey, os.Getenv("AWS_SECRET_ACCESS_KEY"))
	})
}

// Two servers side by side: each has its own port and directory.
func TestTwoServers(t *testing.T) {
	a, b := Start(t), Start(t)
	require.NotEqual(t, a.Endpoint, b.Endpoint)
	require.NotEqual(t, a.Dir, b.Dir)
	a.CreateBucket(t, "xyz")
	b.CreateBucket(t, "xyz")
}

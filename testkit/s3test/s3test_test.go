package s3test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/natstest"
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

// With NATSEvents, a write is announced on the subject: S3's JSON, with the
// bucket and the key as written.
func TestNATSEvents(t *testing.T) {
	ns := natstest.RunServer(t)
	nc := natstest.Connect(t, ns)
	sub, err := nc.SubscribeSync("s3.events")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	s := Start(t, NATSEvents(ns.ClientURL(), "s3.events"))
	s.CreateBucket(t, "bkt")
	s.Put(t, "bkt", "dt=2026-11-28/part 0.csv", []byte("id\n1\n"))
	type event struct {
		Records []struct {
			EventName string `json:"eventName"`
			S3        struct {
				Bucket struct{ Name string } `json:"bucket"`
				Object struct{ Key string }  `json:"object"`
			} `json:"s3"`
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		require.NoError(t, err, "no notification of the put")
		var e event
		require.NoError(t, json.Unmarshal(m.Data, &e), "%s", m.Data)
		if len(e.Records) == 1 && e.Records[0].S3.Bucket.Name == "bkt" {
			require.Equal(t, "s3:ObjectCreated:Put", e.Records[0].EventName)
			require.Equal(t, "dt=2026-11-28/part 0.csv", e.Records[0].S3.Object.Key, "not URL-encoded, unlike AWS's")
			return
		}
	}
}

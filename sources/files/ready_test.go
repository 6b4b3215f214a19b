package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One prefix's listing never reaches a sibling prefix that shares its
// start, nor deeper keys unless the pattern reaches them, nor the writers'
// hidden files.
func TestListingStaysInItsPrefix(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, k := range []string{
				"orders/dt=2026-11-2/a.csv",
				"orders/dt=2026-11-2/b.json",
				"orders/dt=2026-11-2/_SUCCESS",
				"orders/dt=2026-11-2/.a.csv.crc",
				"orders/dt=2026-11-2/sub/c.csv",
				"orders/dt=2026-11-2/sub/deeper/d.csv",
				"orders/dt=2026-11-2/_temporary/0/e.csv",
				"orders/dt=2026-11-28/f.csv",
				"orders/dt=2026-11-2.csv",
			} {
				b.put(t, k, []byte("x\n"))
			}
			list := func(pattern string) []string {
				spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV, Pattern: pattern}
				require.NoError(t, spec.Validate())
				prefix, err := Resolve(spec, day(t, "2026-11-02"))
				require.NoError(t, err)
				files, err := List(context.Background(), b.storeFor(t, spec), spec, prefix)
				require.NoError(t, err)
				return keys(NewListing(prefix, files).Files)
			}
			// Partition keys are canonical (2026-11-02), so the siblings that
			// share a start are listed by their prefixes directly.
			listAt := func(prefix, pattern string) []string {
				s := Spec{URL: b.base + "orders/{partition}/", Format: CSV, Pattern: pattern}
				files, err := List(context.Background(), b.store, s, prefix)
				require.NoError(t, err)
				return keys(NewListing(prefix, files).Files)
			}
			require.Equal(t, []string{"orders/dt=2026-11-2/a.csv", "orders/dt=2026-11-2/b.json"}, listAt("orders/dt=2026-11-2/", ""))
			require.Equal(t, []string{"orders/dt=2026-11-2/a.csv"}, listAt("orders/dt=2026-11-2/", "*.csv"))
			require.Equal(t, []string{"orders/dt=2026-11-2/sub/c.csv"}, listAt("orders/dt=2026-11-2/", "*/*.csv"))
			require.Equal(t, []string{"orders/dt=2026-11-2/sub/deeper/d.csv"}, listAt("orders/dt=2026-11-2/", "sub/*/*"))
			require.Equal(t, []string{"orders/dt=2026-11-28/f.csv"}, listAt("orders/dt=2026-11-28/", ""))
			require.Empty(t, list(""), "dt=2026-11-02 holds nothing")
		})
	}
}

func TestReadyMarker(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV, Ready: ReadyRule{Marker: "_SUCCESS"}}
			store := b.storeFor(t, spec)
			b.put(t, "orders/dt=2026-11-28/part-0.csv", lines("id", "1"))

			r, err := ready(t, store, spec, "2026-11-28", time.Now())
			require.NoError(t, err)
			require.False(t, r.Ready)
			require.Equal(t, "marker _SUCCESS not found", r.Reason)
			var nr *NotReadyError
			require.ErrorAs(t, r.Err(), &nr)
			require.False(t, nr.Fatal())
			require.Contains(t, r.Err().Error(), "not_ready: "+b.base+"orders/dt=2026-11-28/: marker _SUCCESS not found")

			b.put(t, "orders/dt=2026-11-28/_SUCCESS", nil)
			r, err = ready(t, store, spec, "2026-11-28", time.Now())
			require.NoError(t, err)
			require.True(t, r.Ready, r.Reason)
			require.NoError(t, r.Err())
			require.Equal(t, []string{b.base + "orders/dt=2026-11-28/part-0.csv"}, urls(r.Listing.Files))
			require.Equal(t, b.base+"orders/dt=2026-11-28/_SUCCESS", r.Signal.URL)
			require.Len(t, r.Listing.Fingerprint, 64)

			// A marker with no data file is an empty partition, not a wait.
			b.put(t, "orders/dt=2026-11-29/_SUCCESS", nil)
			r, err = ready(t, store, spec, "2026-11-29", time.Now())
			require.NoError(t, err)
			require.True(t, r.Ready)
			require.Empty(t, r.Listing.Files)
		})
	}
}

func TestReadyManifest(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV, Ready: ReadyRule{Manifest: "manifest.json"}}
			store := b.storeFor(t, spec)
			p := "orders/dt=2026-11-28/"
			b.put(t, p+"part-0.csv", lines("id", "1"))                // 5 bytes
			b.put(t, p+"part-1.csv", lines("id", "2", "3"))           // 7 bytes
			b.put(t, p+"stray.csv", lines("id", "999"))               // not in the manifest
			b.put(t, "orders/elsewhere/part-9.csv", lines("id", "9")) // named from another prefix
			manifest := func(entries ...string) []byte {
				return []byte(`{"entries":[` + strings.Join(entries, ",") + `]}`)
			}
			entry := func(key string, size int, mandatory bool) string {
				return fmt.Sprintf(`{"url":%q,"mandatory":%t,"meta":{"content_length":%d}}`, b.base+key, mandatory, size)
			}

			r, err := ready(t, store, spec, "2026-11-28", time.Now())
			require.NoError(t, err)
			require.False(t, r.Ready)
			require.Equal(t, "manifest manifest.json not found", r.Reason)

			// A mandatory entry missing: an error naming it.
			b.put(t, p+"manifest.json", manifest(entry(p+"part-0.csv", 5, true), entry(p+"part-1.csv", 7, true), entry(p+"part-2.csv", 9, true)))
			_, err = ready(t, store, spec, "2026-11-28", time.Now())
			var me *ManifestError
			require.ErrorAs(t, err, &me)
			require.False(t, me.Fatal())
			require.Contains(t, err.Error(), "manifest names 3 files, 1 mandatory missing: "+b.base+p+"part-2.csv")

			// A size that differs from content_length: an error naming both.
			b.put(t, p+"manifest.json", manifest(entry(p+"part-0.csv", 5, true), entry(p+"part-1.csv", 8, true)))
			_, err = ready(t, store, spec, "2026-11-28", time.Now())
			require.ErrorAs(t, err, &me)
			require.Contains(t, err.Error(), b.base+p+"part-1.csv is 7 bytes, the manifest says 8")

			// An entry outside the store.
			b.put(t, p+"manifest.json", manifest(`{"url":"s3://other-bucket/x.csv","mandatory":true}`))
			_, err = ready(t, store, spec, "2026-11-28", time.Now())
			require.ErrorAs(t, err, &me)
			require.Contains(t, err.Error(), `entry "s3://other-bucket/x.csv" is not a file in `+b.base)

			// Exactly the files named: an optional missing entry is skipped,
			// a file elsewhere is taken, the stray file is not.
			b.put(t, p+"manifest.json", manifest(entry(p+"part-0.csv", 5, true), entry(p+"part-1.csv", 7, true),
				entry(p+"part-3.csv", 1, false), entry("orders/elsewhere/part-9.csv", 5, true)))
			r, err = ready(t, store, spec, "2026-11-28", time.Now())
			require.NoError(t, err)
			require.True(t, r.Ready, r.Reason)
			require.Equal(t, []string{b.base + p + "part-0.csv", b.base + p + "part-1.csv", b.base + "orders/elsewhere/part-9.csv"}, urls(r.Listing.Files))
			require.Equal(t, b.base+p+"manifest.json", r.Signal.URL)

			// Not a manifest at all.
			b.put(t, p+"manifest.json", []byte(`[1,2`))
			_, err = ready(t, store, spec, "2026-11-28", time.Now())
			require.ErrorAs(t, err, &me)
			require.Contains(t, err.Error(), "not a manifest")
		})
	}
}

func TestReadyQuietFor(t *testing.T) {
	b := localBackend(t)
	spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV, Ready: ReadyRule{QuietFor: 10 * time.Minute, MinFiles: 2}}
	store := b.storeFor(t, spec)
	p := "orders/dt=2026-11-28/"
	last := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)

	b.put(t, p+"part-0.csv", lines("id", "1"))
	b.touch(t, p+"part-0.csv", last.Add(-time.Hour))
	r, err := ready(t, store, spec, "2026-11-28", last.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, r.Ready)
	require.Equal(t, "1 files, min_files 2", r.Reason)

	b.put(t, p+"part-1.csv", lines("id", "2"))
	b.touch(t, p+"part-1.csv", last)
	r, err = ready(t, store, spec, "2026-11-28", last.Add(2*time.Minute))
	require.NoError(t, err)
	require.False(t, r.Ready)
	require.Equal(t, "last file changed 2m0s ago, quiet_for 10m0s", r.Reason)

	r, err = ready(t, store, spec, "2026-11-28", last.Add(11*time.Minute))
	require.NoError(t, err)
	require.True(t, r.Ready, r.Reason)
	require.Len(t, r.Listing.Files, 2)

	// A store whose clock is ahead waits until it is not.
	r, err = ready(t, store, spec, "2026-11-28", last.Add(-time.Minute))
	require.NoError(t, err)
	require.False(t, r.Ready)
	require.Equal(t, "last file is dated 1m0s after now (the store's clock is ahead), quiet_for 10m0s", r.Reason)

	// A file rewritten in place moves the clock back.
	b.touch(t, p+"part-0.csv", last.Add(10*time.Minute))
	r, err = ready(t, store, spec, "2026-11-28", last.Add(11*time.Minute))
	require.NoError(t, err)
	require.False(t, r.Ready)
	require.Equal(t, "last file changed 1m0s ago, quiet_for 10m0s", r.Reason)
}

// S3 object times come from the server: quiet_for counts from them.
func TestReadyQuietForS3(t *testing.T) {
	b := s3Backend(t)
	spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV, Ready: ReadyRule{QuietFor: time.Hour}}
	store := b.storeFor(t, spec)
	b.put(t, "orders/dt=2026-11-28/part-0.csv", lines("id", "1"))
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	require.False(t, r.Ready)
	require.Contains(t, r.Reason, "quiet_for 1h0m0s")
	r, err = ready(t, store, spec, "2026-11-28", time.Now().Add(2*time.Hour))
	require.NoError(t, err)
	require.True(t, r.Ready, r.Reason)
}

func TestMissingFiles(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV, Pattern: "*.csv"}
			store := b.storeFor(t, spec)
			b.put(t, "orders/dt=2026-11-28/readme.txt", []byte("not data"))
			_, err := ready(t, store, spec, "2026-11-28", time.Now())
			var mf *MissingFilesError
			require.ErrorAs(t, err, &mf)
			require.True(t, strings.HasPrefix(err.Error(), "missing_files: "), err.Error())
			require.Contains(t, err.Error(), b.base+"orders/dt=2026-11-28/")
			require.True(t, mf.Fatal())
			require.Equal(t, "missing_files", mf.FatalReason())

			// A prefix that does not exist at all is the same.
			_, err = ready(t, store, spec, "2026-11-27", time.Now())
			require.ErrorAs(t, err, &mf)
		})
	}
}

// A file replaced between its listing and its read fails the read with a
// ChangedError, whichever way it is read.
func TestChangedBetweenListingAndRead(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			spec := Spec{URL: b.base + "orders/dt={partition}/", Format: CSV}
			store := b.storeFor(t, spec)
			key := "orders/dt=2026-11-28/part-0.csv"
			b.put(t, key, lines("id", "1"))
			r, err := ready(t, store, spec, "2026-11-28", time.Now())
			require.NoError(t, err)
			f := r.Listing.Files[0]

			// Unchanged: both reads pass, and a local read records the hash.
			rc, err := store.Open(context.Background(), &f)
			require.NoError(t, err)
			body, err := io.ReadAll(rc)
			require.NoError(t, err)
			rc.Close()
			require.Equal(t, "id\n1\n", string(body))
			if b.s3 == nil {
				sum := sha256.Sum256(body)
				require.Equal(t, hex.EncodeToString(sum[:]), f.SHA256)
			}

			// Replaced, same size: S3 sees a new ETag (412 on If-Match),
			// local disk a new modification time.
			b.put(t, key, lines("id", "2"))
			if b.touch != nil {
				b.touch(t, key, f.ModTime.Add(time.Second))
			}
			changed := func(err error) {
				t.Helper()
				var ce *ChangedError
				require.ErrorAs(t, err, &ce)
				require.False(t, ce.Fatal())
				require.True(t, strings.HasPrefix(err.Error(), "file_changed: "+b.base+key), err.Error())
			}
			_, err = store.Open(context.Background(), &f)
			changed(err)
			ra, err := store.OpenAt(context.Background(), &f)
			if err == nil {
				_, err = ra.ReadAt(make([]byte, 2), 0)
				ra.Close()
			}
			changed(err)

			// Deleted.
			b.del(t, key)
			_, err = store.Open(context.Background(), &f)
			changed(err)
		})
	}
}

// A local file rewritten while it is read fails at the read's end.
func TestLocalChangeDuringRead(t *testing.T) {
	b := localBackend(t)
	key := "p/part-0.csv"
	b.put(t, key, lines("id", "1", "2"))
	f, err := b.store.Stat(context.Background(), key)
	require.NoError(t, err)
	rc, err := b.store.Open(context.Background(), &f)
	require.NoError(t, err)
	defer rc.Close()
	_, err = rc.Read(make([]byte, 2))
	require.NoError(t, err)
	b.touch(t, key, f.ModTime.Add(time.Minute))
	_, err = io.ReadAll(rc)
	var ce *ChangedError
	require.ErrorAs(t, err, &ce)
	require.Empty(t, f.SHA256)
}

// No error text, nor the store's String, shows the credentials.
func TestErrorsHideCredentials(t *testing.T) {
	b := s3Backend(t)
	const secret = "wrong-secret-0123456789"
	t.Setenv(EnvSecretAccessKey, secret)
	store, err := NewS3(bucket, S3Options{Endpoint: b.s3.Endpoint, PathStyle: true})
	require.NoError(t, err)
	_, err = store.List(context.Background(), "orders/")
	require.Error(t, err)
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), store.String()} {
		require.NotContains(t, s, secret)
		require.NotContains(t, s, b.s3.AccessKey)
		require.NotContains(t, s, b.s3.SecretKey)
	}
	require.Contains(t, err.Error(), "s3 list s3://lake/orders/")

	t.Setenv(EnvSecretAccessKey, "")
	_, err = NewS3(bucket, S3Options{})
	require.ErrorContains(t, err, "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")

	_, err = NewS3(bucket, S3Options{Endpoint: "http://user:pw@127.0.0.1:1"})
	require.ErrorContains(t, err, "holds credentials")
	require.NotContains(t, err.Error(), "pw")
	require.False(t, errors.Is(err, ErrNotFound))
}

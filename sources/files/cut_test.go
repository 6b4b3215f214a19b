package files

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A read of the store that fails mid-file (the connection closed after
// part of the body, as a store or a proxy failing mid-response does) is
// the store's transient error in every format, never a fatal bad_file:
// the file is whole, and the next attempt reads it.
func TestBodyCutMidFileIsTransient(t *testing.T) {
	b := s3Backend(t)
	// Every object body is cut after half its bytes; the headers (and
	// Content-Length) have gone out, so the client sees the body end early.
	proxy := objectProxy(t, b.s3.Endpoint, func(resp *http.Response) {
		if resp.ContentLength > 1 {
			resp.Body = &halfBody{r: resp.Body, left: resp.ContentLength / 2}
		}
	})
	fixtures := map[Format]map[string][]byte{CSV: ordersCSV, NDJSON: ordersNDJSON, Parquet: ordersParquet(t)}
	for format, fx := range fixtures {
		t.Run(string(format), func(t *testing.T) {
			dir := "cut-" + string(format) + "/dt=2026-11-28/"
			for name, body := range fx {
				b.put(t, dir+name, body)
			}
			spec := Spec{URL: b.base + "cut-" + string(format) + "/dt={partition}/", Format: format}
			store, err := NewS3(bucket, S3Options{Endpoint: proxy.URL, PathStyle: true})
			require.NoError(t, err)
			r, err := Ready(context.Background(), store, spec, "cut-"+string(format)+"/dt=2026-11-28/", time.Now())
			require.NoError(t, err)
			require.NotEmpty(t, r.Listing.Files)
			target := Target{Table: pgx.Identifier{"orders"}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}}
			for i := range r.Listing.Files {
				err := readCut(store, spec, &r.Listing.Files[i], target)
				require.Error(t, err, "a cut body read to its end without an error")
				var fatal interface{ Fatal() bool }
				require.False(t, errors.As(err, &fatal) && fatal.Fatal(), "a cut body is fatal: %v", err)
				require.True(t, StoreUnavailable(err), "a cut body is not the store's trouble: %v", err)
			}
		})
	}
}

// A store that closes the connection without an answer (a proxy or a
// load balancer in front of a stopped store does: the client reads "EOF")
// is unavailable in every format, never a fatal bad_file and never the end
// of a file. A Parquet file small enough to be read in the footer's one
// request was read as zeros ("invalid magic header"), dead-lettered
// bad_file; a larger one the store left after its footer ended cleanly
// with none of its rows.
func TestStoreClosingTheConnectionIsTransient(t *testing.T) {
	b := s3Backend(t)
	var closing atomic.Bool
	proxy := objectProxy(t, b.s3.Endpoint, func(*http.Response) {
		if closing.Load() {
			panic(http.ErrAbortHandler) // the connection closed, no response
		}
	})
	store, err := NewS3(bucket, S3Options{Endpoint: proxy.URL, PathStyle: true})
	require.NoError(t, err)
	target := Target{Table: pgx.Identifier{"orders"}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}}
	list := func(t *testing.T, dir string, format Format, fx map[string][]byte) (Spec, []File) {
		for name, body := range fx {
			b.put(t, dir+"dt=2026-11-28/"+name, body)
		}
		spec := Spec{URL: b.base + dir + "dt={partition}/", Format: format}
		r, err := Ready(context.Background(), store, spec, dir+"dt=2026-11-28/", time.Now())
		require.NoError(t, err)
		require.NotEmpty(t, r.Listing.Files)
		return spec, r.Listing.Files
	}
	transient := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err, "a file the store did not serve was read to its end")
		var fatal interface{ Fatal() bool }
		require.False(t, errors.As(err, &fatal) && fatal.Fatal(), "fatal: %v", err)
		require.True(t, StoreUnavailable(err), "not the store's trouble: %v", err)
		require.NotErrorIs(t, err, io.EOF)
	}

	// The store gone before the first read: every object read fails.
	fixtures := map[Format]map[string][]byte{CSV: ordersCSV, NDJSON: ordersNDJSON, Parquet: ordersParquet(t)}
	for format, fx := range fixtures {
		t.Run(string(format), func(t *testing.T) {
			spec, files := list(t, "closed-"+string(format)+"/", format, fx)
			closing.Store(true)
			defer closing.Store(false)
			for i := range files {
				transient(t, readCut(store, spec, &files[i], target))
			}
		})
	}

	// The store gone after the footer of a file larger than the tail read
	// with it: the reads of its pages fail.
	t.Run("parquet pages", func(t *testing.T) {
		rows := make([]parquetOrder, 4000)
		for i := range rows {
			rows[i] = parquetOrder{ID: int32(i), Amount: int64(i), Note: ptr(strings.Repeat("n", 20+i%40))}
		}
		body := writeParquet(t, rows, 500)
		require.Greater(t, len(body), 2*parquetTail)
		spec, files := list(t, "closed-pages/", Parquet, map[string][]byte{"part-0.parquet": body})
		s, err := OpenStream(context.Background(), store, spec, &files[0], target)
		require.NoError(t, err)
		defer s.Close()
		closing.Store(true)
		defer closing.Store(false)
		_, err = bytesRead(s)
		transient(t, err)
	})
}

// readCut opens f and reads its stream to the end, returning the first
// error.
func readCut(store Store, spec Spec, f *File, target Target) error {
	s, err := OpenStream(context.Background(), store, spec, f, target)
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = bytesRead(s)
	return err
}

// halfBody passes left bytes, then fails as a connection closed mid-body.
type halfBody struct {
	r    io.ReadCloser
	left int64
}

func (h *halfBody) Read(p []byte) (int, error) {
	if h.left <= 0 {
		return 0, errors.New("cut")
	}
	if int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= int64(n)
	return n, err
}

func (h *halfBody) Close() error { return h.r.Close() }

// An NDJSON file that itself ends inside an object, read whole, stays a
// fatal bad_file.
func TestNDJSONTruncatedFileIsBadFile(t *testing.T) {
	b := localBackend(t)
	b.put(t, "n/dt=2026-11-28/part-0.json", []byte("{\"id\":1}\n{\"id\":2,\"note\":\"ha"))
	spec := Spec{URL: b.base + "n/dt={partition}/", Format: NDJSON}
	store := b.storeFor(t, spec)
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	err = readCut(store, spec, &r.Listing.Files[0], Target{Table: pgx.Identifier{"orders"}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}})
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	require.Contains(t, err.Error(), "bad_file: ")
}

// A store answering 503 or 500 is unavailable; one refusing the
// credentials (403) or missing the object (404) is not: waiting would not
// help.
func TestStoreUnavailableByStatus(t *testing.T) {
	b := s3Backend(t)
	var status int
	proxy := objectProxy(t, b.s3.Endpoint, func(resp *http.Response) {
		if status != 0 {
			resp.Body.Close()
			resp.StatusCode, resp.ContentLength = status, -1
			resp.Header.Del("Content-Length")
			resp.Body = io.NopCloser(strings.NewReader(`<?xml version="1.0"?><Error><Code>X</Code><Message>x</Message></Error>`))
		}
	})
	b.put(t, "st/dt=2026-11-28/part-0.csv", ordersCSV["part-0.csv"])
	spec := Spec{URL: b.base + "st/dt={partition}/", Format: CSV}
	store, err := NewS3(bucket, S3Options{Endpoint: proxy.URL, PathStyle: true})
	require.NoError(t, err)
	r, err := Ready(context.Background(), store, spec, "st/dt=2026-11-28/", time.Now())
	require.NoError(t, err)
	require.NotEmpty(t, r.Listing.Files)
	target := Target{Table: pgx.Identifier{"orders"}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}}
	for _, c := range []struct {
		status      int
		unavailable bool
	}{{503, true}, {500, true}, {429, true}, {403, false}} {
		status = c.status
		err := readCut(store, spec, &r.Listing.Files[0], target)
		require.Error(t, err, "status %d", c.status)
		require.Equal(t, c.unavailable, StoreUnavailable(err), "status %d: %v", c.status, err)
	}
}

// objectProxy is a proxy in front of the S3 endpoint whose answers to
// object GETs (not listings) change answers first; it closes when t ends.
func objectProxy(t *testing.T, endpoint string, change func(*http.Response)) *httptest.Server {
	t.Helper()
	up, err := url.Parse(endpoint)
	require.NoError(t, err)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(up)
			r.Out.Host = r.In.Host // what the client signed
		},
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodGet && resp.Request.URL.Query().Get("list-type") == "" {
				change(resp)
			}
			return nil
		},
	})
	t.Cleanup(proxy.Close)
	return proxy
}

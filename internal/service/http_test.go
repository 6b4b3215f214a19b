package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProfilesNeedTheToken: the profiles answer only a request that gives
// the operator token, and a CPU profile comes back as one.
func TestProfilesNeedTheToken(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef0123"
	srv := httptest.NewServer(profiles(token))
	defer srv.Close()
	get := func(path, auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	for _, auth := range []string{"", "Bearer wrong-token-of-length", "Basic " + token, "Bearer " + token + "x"} {
		code, body := get("/debug/pprof/", auth)
		require.Equal(t, http.StatusUnauthorized, code, "auth %q", auth)
		require.Contains(t, body, "operator token")
	}
	code, body := get("/debug/pprof/", "Bearer "+token)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine")
	code, body = get("/debug/pprof/profile?seconds=1", "Bearer "+token)
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "\x1f\x8b"), "a gzipped profile")

	// With no token configured nothing is served.
	closed := httptest.NewServer(profiles(""))
	defer closed.Close()
	res, err := http.Get(closed.URL + "/debug/pprof/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
}

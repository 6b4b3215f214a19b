package statuspage

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
)

// A paused dataset's ranges carry its pause, as the document describes it;
// another dataset's carry null.
func TestAPISaysADatasetIsPaused(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	srv := w.server(t, Deps{})
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	_, err := audit.PauseDataset(context.Background(), w.db, "shop", "orders", "alice", "upstream re-export", &until, "")
	require.NoError(t, err)

	a := apiGet(t, srv, "/api/v1/datasets/orders/partitions?from=2026-11-01&to=2026-11-04")
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	var r rangeJSON
	a.decode(t, &r)
	require.NotNil(t, r.Paused)
	require.Equal(t, "alice", r.Paused.By)
	require.Equal(t, "upstream re-export", r.Paused.Reason)
	require.True(t, until.Equal(*r.Paused.Until))

	a = apiGet(t, srv, "/api/v1/datasets/orders/missing?from=2026-11-01&to=2026-11-04")
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	require.Contains(t, string(a.body), `"paused":{"paused_by":"alice"`)

	a = apiGet(t, srv, "/api/v1/datasets/customers/partitions?from=2026-11-01&to=2026-11-04")
	require.Contains(t, string(a.body), `"paused":null`)
}

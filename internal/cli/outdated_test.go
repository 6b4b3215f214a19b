package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/testkit/audittest"
)

// A change of the source SQL leaves outdated exactly the partitions loaded
// under the old one: `idem audit outdated` lists them and names the
// field, and `idem backfill --reprocess outdated` reloads them.
func TestOutdatedAfterASourceChange(t *testing.T) {
	t.Parallel()
	w := newCLIWorld(t)
	w.serve()
	r := w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-05", "--wait", "--timeout", "1m")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.EqualValues(t, 1, w.count("SELECT count(DISTINCT definition_hash) FROM idem.pipeline_audit WHERE status = 'success'"))
	w.stop()

	// Definition B: the same rows, another SELECT.
	b, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	changed := strings.Replace(string(b), "SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition",
		"SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition AND id > 0", 1)
	require.NotEqual(t, string(b), changed)
	require.NoError(t, os.WriteFile(w.cfg, []byte(changed), 0o600))
	w.serve()
	r = w.run("backfill", "orders", "--from", "2026-03-06", "--to", "2026-03-07", "--wait", "--timeout", "1m")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.EqualValues(t, 2, w.count("SELECT count(DISTINCT definition_hash) FROM idem.pipeline_audit WHERE status = 'success'"))
	require.EqualValues(t, 2, w.count("SELECT count(*) FROM idem.definitions WHERE task_id = 'orders'"), "each definition recorded once")
	// A load from before idem recorded definitions.
	_, err = audittest.Load(context.Background(), w.db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders",
		Partition: "2026-02-27", RunID: "old"}}, audit.Rows{Inserted: 10})
	require.NoError(t, err)

	r = w.run("audit", "outdated", "orders")
	require.Equal(t, 1, ExitCode(r.e), "%s%s", r.out, r.err)
	require.Contains(t, r.out, "6 of 8 loaded partition(s) of orders outdated")
	require.Contains(t, r.out, "idem backfill orders --reprocess outdated")
	require.Regexp(t, `2026-02-27 +old .*definition unknown \(loaded before definitions were recorded\)`, r.out)
	require.NotContains(t, r.out, "2026-03-06")
	require.NotContains(t, r.out, "2026-03-07")

	r = w.run("audit", "outdated", "orders", "--json")
	require.Equal(t, 1, ExitCode(r.e), "%s%s", r.out, r.err)
	var rep backfill.OutdatedReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	var parts []string
	for _, o := range rep.Outdated {
		parts = append(parts, o.Partition)
		if o.Partition == "2026-02-27" {
			require.Empty(t, o.Changed)
			require.Empty(t, o.Definition)
			continue
		}
		require.Equal(t, []string{"source"}, o.Changed, o.Partition)
		require.Equal(t, "loaded under an older definition (source changed)", o.Reason)
	}
	require.Equal(t, []string{"2026-02-27", "2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"}, parts)

	r = w.run("audit", "outdated", "orders", "--from", "2026-03-04", "--to", "2026-03-06", "--json")
	require.Equal(t, 1, ExitCode(r.e), "%s%s", r.out, r.err)
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	require.Len(t, rep.Outdated, 2)
	require.Equal(t, 3, rep.Loaded)

	// idem validate says what the config would leave outdated, without
	// failing for it.
	r = w.run("validate")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.Contains(t, r.out, "orders: 6 partition(s) loaded under another definition would be outdated (source changed; 1 loaded before definitions were recorded)")

	// The plan spans the outdated partitions, first to last, and publishes
	// only those.
	r = w.run("backfill", "orders", "--reprocess", "outdated", "--dry-run")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.Contains(t, r.out, "7 partition(s) of orders from 2026-02-27 to 2026-03-05: 6 to publish (6 outdated), 1 skipped (1 missing)")
	seq := w.bfLastSeq()
	r = w.run("backfill", "orders", "--reprocess", "outdated", "--wait", "--timeout", "1m")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.Len(t, w.bfEvents(seq), 6)
	require.Contains(t, r.out, "6 published, 6 loaded, 0 failed")

	r = w.run("audit", "outdated", "orders")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.Contains(t, r.out, "0 of 8 loaded partition(s) of orders outdated")
	r = w.run("backfill", "orders", "--reprocess", "outdated")
	require.NoError(t, r.e, "%s%s", r.out, r.err)
	require.Contains(t, r.out, "nothing to backfill: no partition of orders is outdated")

	r = w.run("audit", "outdated", "orders", "--from", "2026-03-05", "--to", "2026-03-01")
	require.Equal(t, 2, ExitCode(r.e), "%s%s", r.out, r.err)
}

package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
)

func fingerprint(hash, count string) audit.SourceFingerprint {
	return audit.SourceFingerprint{Hash: hash, Values: []audit.FingerprintValue{{Name: "count", Value: &count}}}
}

// The reload a recheck publishes can commit, and store the new fingerprint
// on the partition's row, before the pass records the move: the move must
// still read "before → after", from the fingerprint the pass compared with.
func TestAMoveKeepsWhatThePassComparedWithWhenTheReloadCommittedFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	k := audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-12-05"}
	store := func(id int64, fp audit.SourceFingerprint) {
		b := &pgx.Batch{}
		require.NoError(t, audit.QueueRecordFingerprint(b, id, k, fp))
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
	}
	before, after := fingerprint("aaaa", "2"), fingerprint("bbbb", "3")
	store(1, before)
	store(2, after) // the reload committed first
	require.NoError(t, audit.RecordMove(ctx, db.Pool, k, 1, before, after, "recheck__bbbb"))

	r, err := audit.RecheckOf(ctx, db.Pool, "shop", "orders", "2026-12-05")
	require.NoError(t, err)
	require.NotNil(t, r.Move)
	require.Equal(t, "recheck__bbbb", r.Move.RunID)
	require.Equal(t, "count 2 → 3", r.Move.What())
	require.Equal(t, "bbbb", r.Fingerprint.Hash, "the reload's fingerprint stays the stored one")
	require.EqualValues(t, 1, r.Checks)
}

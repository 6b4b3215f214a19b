package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
)

// Every attempt records the definition it ran, one at a time or in a
// group; LatestSuccesses reads each partition's latest success with it,
// and a definition is recorded once, under its hash.
func TestAttemptsRecordTheirDefinition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	at := func(part, run, hash string) audit.Attempt {
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: part, RunID: run},
			LogicalDate: day(part), DefinitionHash: hash}
	}
	_, err := audittest.Load(ctx, db.Pool, at("2026-11-01", "r1", ""), audit.Rows{Inserted: 1}) // before definitions
	require.NoError(t, err)
	_, err = audittest.Load(ctx, db.Pool, at("2026-11-02", "r1", "aaa"), audit.Rows{Inserted: 1})
	require.NoError(t, err)
	_, err = audittest.Load(ctx, db.Pool, at("2026-11-02", "r2", "bbb"), audit.Rows{Inserted: 1})
	require.NoError(t, err)
	// A later failure does not hide the latest success.
	id, err := audittest.Start(ctx, db.Pool, at("2026-11-02", "r3", "ccc"))
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, context.Canceled, audit.KindFatal))

	// A group writes each attempt's hash into its started row.
	var gs []audit.GroupBegin
	for _, p := range []string{"2026-11-03", "2026-11-04"} {
		gs = append(gs, audit.GroupBegin{Attempt: at(p, "r1", "ggg"), Into: new(audit.Begun)})
	}
	var ran bool
	require.NoError(t, audittest.Send(ctx, db.Pool, func(b *pgx.Batch) { require.NoError(t, audit.QueueBeginGroup(b, gs, &ran)) }))
	require.True(t, ran)
	for _, g := range gs {
		require.NoError(t, audittest.Succeed(ctx, db.Pool, g.Attempt.RunKey, g.Into.ID, audit.Rows{}, false))
	}
	require.EqualValues(t, 2, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE definition_hash = 'ggg'"))

	got, err := audit.LatestSuccesses(ctx, db.Pool, "shop", "orders", "", "")
	require.NoError(t, err)
	require.Len(t, got, 4)
	hash := func(l audit.Loaded) string {
		if l.Definition == nil {
			return "<nil>"
		}
		return *l.Definition
	}
	require.Equal(t, []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"},
		[]string{got[0].Partition, got[1].Partition, got[2].Partition, got[3].Partition})
	require.Equal(t, []string{"<nil>", "bbb", "ggg", "ggg"}, []string{hash(got[0]), hash(got[1]), hash(got[2]), hash(got[3])})
	require.Equal(t, "r2", got[1].RunID)
	got, err = audit.LatestSuccesses(ctx, db.Pool, "shop", "orders", "2026-11-02", "2026-11-03")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.True(t, audit.Outdated(got[0].Definition, "ggg"))
	require.False(t, audit.Outdated(got[1].Definition, "ggg"))
	require.False(t, audit.Outdated(nil, "ggg"), "a load from before definitions were recorded is not known to be outdated")
	require.False(t, audit.Outdated(nil, ""))

	require.NoError(t, audit.RecordDefinition(ctx, db.Pool, "shop", "orders", "bbb", []byte(`{"source":"SELECT 1"}`)))
	require.NoError(t, audit.RecordDefinition(ctx, db.Pool, "shop", "orders", "bbb", []byte(`{"source":"SELECT 2"}`)))
	defs, err := audit.DefinitionsOf(ctx, db.Pool, "shop", "orders", []string{"bbb", "zzz"})
	require.NoError(t, err)
	require.Len(t, defs, 1)
	require.JSONEq(t, `{"source":"SELECT 1"}`, string(defs["bbb"]), "the first definition recorded under a hash stays")
}

package pgsource

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestStateKind(t *testing.T) {
	cases := []struct {
		code   string
		kind   Kind
		reason string
	}{
		{"08006", KindUnavailable, ""}, // connection failure
		{"28P01", KindUnavailable, ""}, // a rotated password
		{"53300", KindUnavailable, ""}, // too many connections
		{"57P01", KindUnavailable, ""}, // admin shutdown
		{"57P03", KindUnavailable, ""}, // cannot connect now (starting up)
		{"3D000", KindFatal, ReasonSourceConfig},
		{"57P04", KindFatal, ReasonSourceConfig}, // the database was dropped on the primary
		{"42501", KindFatal, ReasonSourcePermission},
		{"42P01", KindFatal, ReasonSourceSQL},
		{"42703", KindFatal, ReasonSourceSQL},
		{"42601", KindFatal, ReasonSourceSQL},
		{"3F000", KindFatal, ReasonSourceSQL},
		{"25006", KindFatal, ReasonSourceSQL}, // the query writes
		{"0A000", KindFatal, ReasonSourceSQL},
		{"22007", KindFatal, ReasonSourceData},
		{"22P02", KindFatal, ReasonSourceData},
		{"P0001", KindFatal, ReasonSourceData},
		{"57014", KindTransient, ""}, // statement timeout
		{"40001", KindTransient, ""}, // a conflict that reached classify (never from Copy)
		{"XX000", KindTransient, ""},
		{"", KindTransient, ""},
	}
	for _, c := range cases {
		kind, reason := stateKind(c.code)
		require.Equal(t, c.kind, kind, c.code)
		require.Equal(t, c.reason, reason, c.code)
	}
}

func TestClassify(t *testing.T) {
	ctx := context.Background()
	err := classify(ctx, &pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: `relation "x" does not exist`, Hint: "pw " + secret},
		"db:5432/shop", "copy", secret)
	var e *Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, `source_sql: pgsource: copy on db:5432/shop: ERROR: relation "x" does not exist (SQLSTATE 42P01); hint: pw xxxxx`, err.Error())
	require.Same(t, err, classify(ctx, err, "other", "other", ""), "idempotent")
	var pgErr *pgconn.PgError
	require.False(t, errors.As(err, &pgErr))

	err = classify(ctx, errors.New("unexpected EOF"), "db:5432/shop", "copy", secret)
	require.True(t, errors.As(err, &e))
	require.Equal(t, KindTransient, e.Kind)
	require.False(t, e.Fatal())
	require.Equal(t, "", e.FatalReason())

	_, parseErr := pgconn.ParseConfig("postgres://app:" + secret + "@db:bad/shop")
	require.Error(t, parseErr)
	err = classify(ctx, parseErr, "(unparsable url)", "connect", "")
	require.True(t, errors.As(err, &e))
	require.Equal(t, ReasonSourceConfig, e.FatalReason())
	noSecret(t, err.Error())
	require.NotContains(t, err.Error(), "db:bad")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = classify(cctx, fmt.Errorf("anything"), "db:5432/shop", "copy", secret)
	require.ErrorIs(t, err, context.Canceled)

	require.True(t, isRecoveryConflict(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40001"})))
	require.True(t, isRecoveryConflict(&pgconn.PgError{Code: "40P01"}))
	require.False(t, isRecoveryConflict(&pgconn.PgError{Code: "57014"}))
}

func TestLagErrorRetryAfter(t *testing.T) {
	require.Equal(t, time.Second, (&LagError{Lag: 1100 * time.Millisecond, Limit: time.Second}).RetryAfter())
	require.Equal(t, time.Minute, (&LagError{Lag: time.Hour, Limit: time.Second}).RetryAfter())
	require.Equal(t, 5*time.Second, (&LagError{Lag: -1, Limit: 5 * time.Second}).RetryAfter())
	require.Contains(t, (&LagError{Lag: -1, Limit: time.Second}).Error(), "no transaction replayed")
}

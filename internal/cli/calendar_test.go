package cli

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A partition never published is reported missing, then late once its
// deadline passes (the clock given with --at, never a sleep).
func TestAuditMissingFromTheCalendar(t *testing.T) {
	w := newCLIWorld(t)
	b, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(w.cfg, append(b, []byte("    expect: {every: day, from: 2026-03-01, deadline: 3h}\n")...), 0o600))
	w.serve()
	for _, p := range []string{"2026-03-01", "2026-03-03"} {
		require.NoError(t, w.run("publish", "orders", p, "--run-id", "r1").e)
	}
	w.waitCount(2, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")

	// 5 March 02:00: days 1-4 ended; the 2nd was due on the 3rd at 03:00,
	// the 4th is due at 03:00 today.
	r := w.run("audit", "missing", "orders", "--at", "2026-03-05T02:00:00Z")
	require.ErrorIs(t, r.e, ErrReported)
	require.Equal(t, "PARTITION   STATE    DUE\n"+
		"2026-03-02  late     2026-03-03T03:00:00Z\n"+
		"2026-03-04  missing  2026-03-05T03:00:00Z\n"+
		"2 of 4 expected partition(s) of orders not loaded: 1 late, 1 within the deadline\n", r.out)

	r = w.run("audit", "missing", "orders", "--at", "2026-03-05T03:00:00Z", "--json")
	require.ErrorIs(t, r.e, ErrReported)
	var got struct {
		Expected int
		Missing  []calendarGap
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	require.Equal(t, 4, got.Expected)
	require.Len(t, got.Missing, 2)
	require.Equal(t, "late", got.Missing[1].State)

	r = w.run("audit", "missing", "orders", "--at", "2026-03-05T03:00:00Z", "--to", "2026-03-01")
	require.NoError(t, r.e, r.out)
	require.Equal(t, "0 of 1 expected partition(s) of orders not loaded: 0 late, 0 within the deadline\n", r.out)

	// Before the first day ends nothing is expected.
	r = w.run("audit", "missing", "orders", "--at", "2026-03-01T23:00:00Z")
	require.NoError(t, r.e, r.out)

	var usage *UsageError
	require.ErrorAs(t, w.run("audit", "missing", "orders", "--at", "yesterday").e, &usage)
}

// Without a calendar, the dates stay required.
func TestAuditMissingNeedsDatesWithoutACalendar(t *testing.T) {
	w := newCLIWorld(t)
	var usage *UsageError
	r := w.run("audit", "missing", "orders")
	require.ErrorAs(t, r.e, &usage)
	require.Contains(t, r.e.Error(), "has no calendar")
}

// A backfill of a calendar dataset without dates plans over the calendar:
// every partition since its first, the missing and failed ones published.
func TestBackfillFromTheCalendar(t *testing.T) {
	w := newCLIWorld(t)
	b, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	from := time.Now().UTC().AddDate(0, 0, -4).Format(time.DateOnly)
	require.NoError(t, os.WriteFile(w.cfg, append(b, []byte("    expect: {every: day, from: "+from+"}\n")...), 0o600))

	before := time.Now().UTC()
	r := w.run("backfill", "orders", "--dry-run", "--json")
	after := time.Now().UTC() // the run may straddle midnight
	require.NoError(t, r.e, r.err)
	var plan struct {
		From, To  string
		Planned   int
		ToPublish int `json:"to_publish"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &plan))
	require.Equal(t, from, plan.From)
	require.Contains(t, []string{before.AddDate(0, 0, -1).Format(time.DateOnly), after.AddDate(0, 0, -1).Format(time.DateOnly)}, plan.To)
	days := int(after.Truncate(24*time.Hour).Sub(before.Truncate(24*time.Hour)).Hours() / 24)
	require.Contains(t, []int{4, 4 + days}, plan.Planned)

	var usage *UsageError
	require.ErrorAs(t, w.run("backfill", "orders", "--from", from).e, &usage)
}

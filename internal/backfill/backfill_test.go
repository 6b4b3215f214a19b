package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
)

func TestPolicyState(t *testing.T) {
	p := policy{ackWait: 30 * time.Second, retry: consumer.Retry{MaxAttempts: 4, Delay: 10 * time.Second, MaxDelay: 30 * time.Minute}}
	for _, c := range []struct {
		name string
		l    audit.LatestAttempt
		want string
	}{
		{"never attempted", audit.LatestAttempt{Status: audit.StatusMissing}, StatusMissing},
		{"loaded", audit.LatestAttempt{Status: audit.StatusSuccess}, StatusSuccess},
		{"fatal", audit.LatestAttempt{Status: audit.StatusFailed, ErrorKind: "fatal", Attempt: 1}, StatusFailed},
		{"last delivery", audit.LatestAttempt{Status: audit.StatusFailed, ErrorKind: "transient", Attempt: 4}, StatusFailed},
		// attempt 2's backoff is at most 40s; plus the 30s ack wait.
		{"redelivery due", audit.LatestAttempt{Status: audit.StatusFailed, ErrorKind: "transient", Attempt: 2, Age: 69 * time.Second}, StatusRetrying},
		{"redelivery overdue", audit.LatestAttempt{Status: audit.StatusFailed, ErrorKind: "transient", Attempt: 2, Age: 71 * time.Second}, StatusFailed},
		{"lock held, however old", audit.LatestAttempt{Status: audit.StatusStarted, Locked: true, Age: 48 * time.Hour}, StatusRunning},
		{"just started", audit.LatestAttempt{Status: audit.StatusStarted, Age: 59 * time.Second}, StatusRunning},
		{"died", audit.LatestAttempt{Status: audit.StatusStarted, Age: 61 * time.Second}, StatusStale},
	} {
		got, reason := p.state(c.l)
		require.Equal(t, c.want, got, "%s: %s", c.name, reason)
	}

	for _, c := range []struct {
		r    Reprocess
		want []string
	}{
		{Reprocess{Missing: true, Failed: true}, []string{StatusMissing, StatusFailed, StatusStale}},
		{Reprocess{Missing: true}, []string{StatusMissing}},
		{Reprocess{Failed: true}, []string{StatusFailed, StatusStale}},
		{Reprocess{All: true}, []string{StatusMissing, StatusFailed, StatusStale, StatusSuccess}},
		{Reprocess{Missing: true, All: true}, []string{StatusMissing, StatusFailed, StatusStale, StatusSuccess}},
	} {
		var got []string
		for _, s := range []string{StatusMissing, StatusFailed, StatusStale, StatusSuccess, StatusRunning, StatusRetrying} {
			if c.r.wants(s) {
				got = append(got, s)
			}
		}
		require.Equal(t, c.want, got, c.r.String())
	}
}

func TestOutcome(t *testing.T) {
	rows := int64(10)
	crash := deadLetter{kind: "crashed", err: "died"}
	for _, c := range []struct {
		name string
		a    audit.RunAttempt
		dl   *deadLetter
		want Outcome
	}{
		{"no attempt yet", audit.RunAttempt{}, nil, Outcome{Status: "queued"}},
		{"running", audit.RunAttempt{Status: "started", Attempt: 1}, nil, Outcome{Status: "started", Attempts: 1}},
		{"loaded", audit.RunAttempt{Succeeded: true, Status: "success", Attempt: 2, RowCount: &rows}, nil,
			Outcome{Status: "success", Final: true, Attempts: 2, Rows: &rows}},
		{"fatal", audit.RunAttempt{Status: "failed", ErrorKind: "fatal", Attempt: 1, Error: "x"}, nil,
			Outcome{Status: "failed", Final: true, Attempts: 1, DLQ: "fatal", Error: "x"}},
		{"exhausted", audit.RunAttempt{Status: "failed", ErrorKind: "transient", Attempt: 2, Error: "x"}, nil,
			Outcome{Status: "failed", Final: true, Attempts: 2, DLQ: "exhausted", Error: "x"}},
		{"will retry", audit.RunAttempt{Status: "failed", ErrorKind: "transient", Attempt: 1, Error: "x"}, nil,
			Outcome{Status: "retrying", Attempts: 1, Error: "x"}},
		{"crashed", audit.RunAttempt{Status: "started", Attempt: 2}, &crash,
			Outcome{Status: "failed", Final: true, Attempts: 2, DLQ: "crashed", Error: "died"}},
		{"success wins over a stale dead letter", audit.RunAttempt{Succeeded: true, Status: "success", Attempt: 1}, &crash,
			Outcome{Status: "success", Final: true, Attempts: 1}},
	} {
		var dl deadLetter
		if c.dl != nil {
			dl = *c.dl
		}
		require.Equal(t, c.want, outcome(c.a, dl, c.dl != nil, 2), c.name)
	}
}

func TestReprocessString(t *testing.T) {
	require.Equal(t, "missing,failed", Reprocess{Missing: true, Failed: true}.String())
	require.Equal(t, "all", Reprocess{Missing: true, All: true}.String())
}

func TestKeys(t *testing.T) {
	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	keys, err := Keys(Day, day("2024-02-27"), day("2024-03-01"))
	require.NoError(t, err)
	require.Equal(t, []string{"2024-02-27", "2024-02-28", "2024-02-29", "2024-03-01"}, keys)
	require.Equal(t, 4, Span(Day, day("2024-02-27"), day("2024-03-01")))

	from := day("2026-01-01").Add(22 * time.Hour)
	keys, err = Keys(Hour, from, from.Add(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{"2026-01-01T22:00:00Z", "2026-01-01T23:00:00Z", "2026-01-02T00:00:00Z", "2026-01-02T01:00:00Z"}, keys)
	require.Equal(t, 4, Span(Hour, from, from.Add(3*time.Hour)))
}

func TestCompactDuration(t *testing.T) {
	require.Equal(t, "45s", CompactDuration(45*time.Second))
	require.Equal(t, "12m05s", CompactDuration(12*time.Minute+5*time.Second))
	require.Equal(t, "3h20m", CompactDuration(3*time.Hour+20*time.Minute+40*time.Second))
}

func TestPacerSpacesEvents(t *testing.T) {
	p := &pacer{every: 20 * time.Millisecond}
	start := time.Now()
	for range 4 {
		require.NoError(t, p.wait(t.Context()))
	}
	require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond, "three gaps between four events")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p = &pacer{every: time.Hour, next: time.Now().Add(time.Hour)}
	require.ErrorIs(t, p.wait(ctx), context.Canceled)
}

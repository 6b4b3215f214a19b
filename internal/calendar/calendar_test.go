package calendar

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func keys[T interface{ key() string }](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.key()
	}
	return out
}

func (s Slot) key() string { return s.Key }
func (g Gap) key() string {
	if g.Late {
		return g.Key + " late"
	}
	return g.Key + " missing"
}

func TestDailyMissingThenLate(t *testing.T) {
	e := Expect{Every: Day, From: "2026-11-01", Deadline: 3 * time.Hour}
	loaded := map[string]bool{"2026-11-01": true, "2026-11-03": true}
	has := func(k string) bool { return loaded[k] }

	// 2026-11-04 10:00: days 1-3 have ended; day 2 is past its deadline (day
	// 3 03:00), day 4 has not ended.
	require.Equal(t, []string{"2026-11-02 late"}, keys(e.Gaps(at("2026-11-04T10:00:00Z"), "", "", has)))
	// Just before day 5 03:00: day 4 is missing, not yet late; at 03:00 it is.
	require.Equal(t, []string{"2026-11-02 late", "2026-11-04 missing"}, keys(e.Gaps(at("2026-11-05T02:59:59Z"), "", "", has)))
	require.Equal(t, []string{"2026-11-02 late", "2026-11-04 late"}, keys(e.Gaps(at("2026-11-05T03:00:00Z"), "", "", has)))
	// Bounds.
	require.Equal(t, []string{"2026-11-04 late"}, keys(e.Gaps(at("2026-11-05T03:00:00Z"), "2026-11-03", "", has)))
	require.Equal(t, []string{"2026-11-02 late"}, keys(e.Gaps(at("2026-11-05T03:00:00Z"), "", "2026-11-03", has)))
	// Before the first partition ends, nothing is expected.
	require.Empty(t, e.Gaps(at("2026-11-01T23:59:59Z"), "", "", has))

	s := e.Summarize(at("2026-11-05T02:00:00Z"), has)
	require.Equal(t, Summary{Missing: 1, Late: 1, NewestLoaded: at("2026-11-04T00:00:00Z")}, s)
}

func TestDaysInATimeZone(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	e := Expect{Every: Day, From: "2026-10-24", Deadline: time.Hour, Location: paris}
	ended := e.Ended(at("2026-10-27T00:00:00Z"), "", "")
	require.Equal(t, []string{"2026-10-24", "2026-10-25", "2026-10-26"}, keys(ended))
	// 25 October 2026 is the 25-hour day in Paris (the clocks go back).
	require.Equal(t, 25*time.Hour, ended[1].End.Sub(ended[1].Start))
	// Day 26 ends at midnight Paris time, 23:00 UTC, and is due an hour later.
	require.Equal(t, at("2026-10-26T23:00:00Z"), ended[2].End.UTC())
	require.Equal(t, at("2026-10-27T00:00:00Z"), ended[2].Due.UTC())
}

func TestHourly(t *testing.T) {
	e := Expect{Every: Hour, From: "2026-11-28T22:00:00Z", Deadline: 30 * time.Minute}
	has := func(k string) bool { return k == "2026-11-28T23:00:00Z" }
	require.Equal(t, []string{"2026-11-28T22:00:00Z late", "2026-11-29T00:00:00Z missing"},
		keys(e.Gaps(at("2026-11-29T01:10:00Z"), "", "", has)))
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		e    Expect
		want string
	}{
		{Expect{Every: "week", From: "2026-01-01"}, `every: "week" is not a period`},
		{Expect{Every: Day, From: "2026-02-30"}, `from: "2026-02-30" is not a day`},
		{Expect{Every: Hour, From: "2026-01-01"}, `from: "2026-01-01" is not an hour`},
		{Expect{Every: Day, From: "2026-01-01", Deadline: -time.Hour}, "deadline: -1h0m0s is negative"},
	} {
		err := tc.e.Validate()
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
	}
	require.NoError(t, Expect{Every: Hour, From: "2026-01-01T00:00:00Z"}.Validate())
}

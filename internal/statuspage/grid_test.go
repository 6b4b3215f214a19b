package statuspage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
)

func TestBuildColoursEveryStatus(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	cal := &calendar.Expect{Every: calendar.Day, From: "2026-11-01", Deadline: 12 * time.Hour}
	dss := []Dataset{
		{Name: "web", Calendar: cal},
		{Name: "shop", Calendar: cal},
		{Name: "revenue", Upstreams: []string{"web", "shop"}},
		{Name: "adhoc", Definition: "cur"},
	}
	keys := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}
	latest := []audit.Latest{
		{Dataset: "web", Partition: "2026-11-01", Status: "success"},
		{Dataset: "web", Partition: "2026-11-02", Status: "failed", ErrorKind: "fatal"},
		{Dataset: "web", Partition: "2026-11-03", Status: "failed", ErrorKind: "transient"},
		{Dataset: "web", Partition: "2026-11-04", Status: "started", RunID: "r1"},
		{Dataset: "shop", Partition: "2026-11-01", Status: "success"},
		{Dataset: "revenue", Partition: "2026-11-01", Status: "success"},
		{Dataset: "adhoc", Partition: "2026-11-03", Status: "success", Definition: ptr("cur")},
		// Loaded under another definition, and before definitions were recorded.
		{Dataset: "adhoc", Partition: "2026-11-01", Status: "success", Definition: ptr("old")},
		{Dataset: "adhoc", Partition: "2026-11-02", Status: "success"}, // before definitions were recorded: not known to be outdated
		// The checks refused the latest load, dead-lettered or not.
		{Dataset: "adhoc", Partition: "2026-11-04", Status: "failed", ErrorKind: "check"},
	}
	dead := []DeadLetter{{Dataset: "web", Partition: "2026-11-02"}, {Dataset: "web", Partition: "2026-11-04", RunID: "r0"}}
	g := build(now, dss, keys, latest, nil, dead)
	got := map[string][]Status{}
	for _, r := range g.Rows {
		got[r.Dataset] = r.Cells
	}
	require.Equal(t, map[string][]Status{
		// 11-04 ended at 11-05 00:00 and is due at 12:00: still missing for shop.
		"web":     {Success, DeadLettered, Failed, Running}, // 11-04's dead letter is an older run's
		"shop":    {Success, Late, Late, Missing},
		"revenue": {Success, Waiting, Waiting, Waiting},
		"adhoc":   {Outdated, Success, Success, Rejected},
	}, got)
	require.Equal(t, 5, g.Counts[Success]) // web, shop, revenue, adhoc twice
	require.Equal(t, 2, g.Counts[Late])
	require.Equal(t, 3, g.Counts[Waiting])
	require.Equal(t, 0, g.Counts[None])
	require.Equal(t, 1, g.Counts[Outdated])
	require.Equal(t, 1, g.Counts[Rejected])
}

func TestColumns(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	cal := &calendar.Expect{Every: calendar.Day, From: "2026-11-01"}
	dss := []Dataset{{Name: "a", Calendar: cal}, {Name: "b"}}
	// Calendar days 11-01..11-04 plus a partition b ran for, newest 3 kept.
	require.Equal(t, []string{"2026-11-03", "2026-11-04", "2026-11-09"}, columns(now, dss, []string{"2026-11-09", "2026-10-01"}, "", "", 3))
	require.Equal(t, []string{"2026-10-01", "2026-11-01", "2026-11-02"}, columns(now, dss, []string{"2026-11-09", "2026-10-01"}, "", "2026-11-02", 10))
}

// The process died in the last allowed attempt: the row stays started and
// the message is dead-lettered as crashed.
func TestBuildCrashedIsDeadLettered(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	g := build(now, []Dataset{{Name: "web"}}, []string{"2026-11-04"},
		[]audit.Latest{{Dataset: "web", Partition: "2026-11-04", Status: "started", RunID: "poison"}}, nil,
		[]DeadLetter{{Dataset: "web", Partition: "2026-11-04", RunID: "poison", Kind: "crashed"}})
	require.Equal(t, []Status{DeadLettered}, g.Rows[0].Cells)
}

// A current source wait colours its cell waiting, over an older failure;
// one that gave up is dead-lettered once its dead letter is listed.
func TestBuildSourceWaits(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	keys := []string{"2026-11-02", "2026-11-03", "2026-11-04"}
	g := build(now, []Dataset{{Name: "landed"}}, keys,
		[]audit.Latest{{Dataset: "landed", Partition: "2026-11-02", Status: "failed", ErrorKind: "transient", RunID: "r1"}},
		[]audit.Wait{
			{Dataset: "landed", Partition: "2026-11-02", RunID: "r2", Reason: "marker _SUCCESS not found"},
			{Dataset: "landed", Partition: "2026-11-03", RunID: "r3", GaveUp: true},
			{Dataset: "landed", Partition: "2026-11-04", RunID: "r4", GaveUp: true},
		},
		[]DeadLetter{{Dataset: "landed", Partition: "2026-11-03", RunID: "r3", Kind: "fatal"}})
	require.Equal(t, []Status{Waiting, DeadLettered, None}, g.Rows[0].Cells)
}

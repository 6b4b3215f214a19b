package config

import (
	"strings"
	"time"

	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/sqlcheck"
	"github.com/idem-data/idem/schemas"
)

// Recheck reloads the partitions of a recent window whose source changed
// since their last load: each success stores a fingerprint of its source,
// and every Every one replica takes the fingerprints again and publishes
// a reload of each partition whose fingerprint moved.
type Recheck struct {
	// Window is how far back from now partitions are rechecked, over
	// partition keys: 7d holds the partitions of the last seven days. A
	// partition inside it is provisional; it is final once the window
	// has passed it.
	Window Duration `yaml:"window"`
	// Every is the period of a pass; at least MinRecheckEvery.
	Every Duration `yaml:"every,omitempty"`
	// Fingerprint, on a SELECT or postgres: source, is one SELECT bound
	// like the source (@partition) whose row changes when the partition's
	// rows do, e.g. SELECT count(*), max(updated_at) FROM staging.orders
	// WHERE event_date = @partition; a postgres: source's runs on that
	// server. Default: the count and a hash of the source's rows. A
	// files: source uses its listing (names, sizes, ETags).
	Fingerprint string `yaml:"fingerprint,omitempty"`
}

// Bounds and defaults of recheck:.
const (
	DefaultRecheckEvery = Duration(time.Hour)
	// MinRecheckEvery keeps a pass from asking every partition's source
	// more often than a correction can usefully land.
	MinRecheckEvery = Duration(time.Second)
	// MaxRecheckWindow bounds the partitions a pass asks.
	MaxRecheckWindow = Duration(400 * 24 * time.Hour)
)

func (r *Recheck) withDefaults() {
	if r != nil && r.Every == 0 {
		r.Every = DefaultRecheckEvery
	}
}

// validateRecheck checks recheck: date or hour partitions, bounds, and a
// fingerprint query checked as a source is.
func validateRecheck(v *validator, d *Dataset) {
	r := d.Recheck
	if r == nil {
		return
	}
	if pt := partitionType(d); pt != schemas.PartitionDate && pt != schemas.PartitionHour {
		v.add("recheck", "needs date or timestamp partitions, whose keys a window counts back over; partition_type %s has none: remove recheck", pt)
	}
	if r.Window <= 0 || r.Window > MaxRecheckWindow {
		v.add("recheck.window", "%s; use a duration such as 7d, up to %s", r.Window, MaxRecheckWindow)
	}
	if r.Every < MinRecheckEvery {
		v.add("recheck.every", "%s; use at least %s (default %s)", r.Every, MinRecheckEvery, DefaultRecheckEvery)
	}
	sql := r.Fingerprint
	if sql == "" {
		return
	}
	if d.Source.Files != nil {
		v.add("recheck.fingerprint", "a files: source is fingerprinted by its listing; remove fingerprint")
		return
	}
	for _, f := range sqlcheck.WallClock(sql) {
		v.add("recheck.fingerprint", "reads the wall clock with %s (byte %d), so it would move with the day, not the data; use @partition instead", f.Name, f.Offset)
	}
	for _, p := range sqlcheck.Params(sql) {
		if p != "partition" {
			v.add("recheck.fingerprint", "uses @%s, which a recheck does not bind; it binds only @partition", p)
		}
	}
	for _, f := range sqlcheck.NotARead(sql) {
		v.add("recheck.fingerprint", "is more than one read: %s (byte %d); write one SELECT", f.Name, f.Offset)
	}
	if !sqlcheck.StartsWithSelect(sql) {
		v.add("recheck.fingerprint", "is not a SELECT; write one, e.g. SELECT count(*), max(updated_at) FROM staging.orders WHERE event_date = @partition")
	}
}

// FingerprintSQL is the fingerprint query of dataset d's recheck: its
// fingerprint:, or by default the count of its source's rows and the sum
// of their hashes (order-free, in constant memory; it reads every row of
// the partition, so a fingerprint: on an index is cheaper). "" for a
// files: source, fingerprinted by its listing, and without recheck.
func (d *Dataset) FingerprintSQL() string {
	r := d.Recheck
	if r == nil || d.Source.Files != nil {
		return ""
	}
	if r.Fingerprint != "" {
		return r.Fingerprint
	}
	src := d.Source.SQL
	if d.Source.Postgres != nil {
		src = d.Source.Postgres.SQL
	}
	src = strings.TrimRight(src, "; \t\r\n")
	return "SELECT count(*) AS rows, coalesce(sum(hashtextextended(s::text, 0)), 0) AS rows_hash FROM (\n" + src + "\n) s"
}

// RecheckWindow is d's recheck window: a partition loaded inside it is
// provisional. ok is false without recheck:.
func (d *Dataset) RecheckWindow() (w calendar.Window, ok bool) {
	if d == nil || d.Recheck == nil {
		return w, false
	}
	return calendar.Window{Length: d.Recheck.Window.Std(), Hourly: partitionType(d) == schemas.PartitionHour}, true
}

package config

import (
	"strings"
	"time"

	"github.com/idem-data/idem/internal/defaults"
	"github.com/idem-data/idem/schemas"
)

// Watch: idem publishes the events of new and changed partitions itself
// (docs/SOURCES.md).
type Watch struct {
	// Every is how often partitions are listed; at least MinWatchEvery.
	Every Duration `yaml:"every,omitempty"`
	// Last is how many: the current partition and those before it; at
	// most MaxWatchLast.
	Last int `yaml:"last,omitempty"`
	// Notifications: S3 event notifications on NATS list the partition
	// they name at once.
	Notifications *WatchNotifications `yaml:"notifications,omitempty"`
	// Retries is how many times a listing dead-lettered for no fault of
	// its files is published again; 0 never. At most MaxWatchRetries.
	Retries *int `yaml:"retries,omitempty"`
	// RetryAfter is the wait before the first, doubled for each next;
	// MinWatchRetryAfter to MaxWatchRetryAfter.
	RetryAfter Duration `yaml:"retry_after,omitempty"`
}

// WatchNotifications says where notifications arrive.
type WatchNotifications struct {
	// Subject is a core NATS subject (wildcards allowed).
	Subject string `yaml:"subject"`
}

// Bounds and defaults of watch:.
const (
	DefaultWatchEvery = Duration(time.Minute)
	// MinWatchEvery keeps a watch from listing the store, and asking the
	// audit, more often than a partition can usefully change.
	MinWatchEvery    = Duration(5 * time.Second)
	DefaultWatchLast = 7
	MaxWatchLast     = 1000
	// DefaultWatchRetries and DefaultWatchRetryAfter: a listing is
	// published again 5, 10 and 20 minutes after each dead letter.
	DefaultWatchRetries    = defaults.WatchRetries
	MaxWatchRetries        = 10
	DefaultWatchRetryAfter = Duration(defaults.WatchRetryAfter)
	MinWatchRetryAfter     = Duration(time.Minute)
	MaxWatchRetryAfter     = Duration(24 * time.Hour)
)

func (w *Watch) withDefaults() {
	if w == nil {
		return
	}
	if w.Every == 0 {
		w.Every = DefaultWatchEvery
	}
	if w.Last == 0 {
		w.Last = DefaultWatchLast
	}
	if w.Retries == nil {
		r := DefaultWatchRetries
		w.Retries = &r
	}
	if w.RetryAfter == 0 {
		w.RetryAfter = DefaultWatchRetryAfter
	}
}

// validateWatch checks watch: a files: source, a date or hour partition,
// bounds, and a notification subject that none of idem's own streams
// captures.
func (c *Config) validateWatch(v *validator, d *Dataset) {
	w := d.Watch
	if w == nil {
		return
	}
	if d.Source.Files == nil {
		v.add("watch", "only a files: source can be watched (its partitions are listed in the store); remove watch, or publish the events")
		return
	}
	if pt := partitionType(d); pt != schemas.PartitionDate && pt != schemas.PartitionHour {
		v.add("watch", "needs date or timestamp partitions, the newest of which it lists; partition_type %s has no newest: remove watch", pt)
	}
	if w.Every < MinWatchEvery {
		v.add("watch.every", "%s; use at least %s (default %s)", w.Every, MinWatchEvery, DefaultWatchEvery)
	}
	if w.Last < 1 || w.Last > MaxWatchLast {
		v.add("watch.last", "%d; use 1 to %d partitions (default %d)", w.Last, MaxWatchLast, DefaultWatchLast)
	}
	if w.Retries != nil && (*w.Retries < 0 || *w.Retries > MaxWatchRetries) {
		v.add("watch.retries", "%d; use 0 (never) to %d (default %d)", *w.Retries, MaxWatchRetries, DefaultWatchRetries)
	}
	if w.RetryAfter < MinWatchRetryAfter || w.RetryAfter > MaxWatchRetryAfter {
		v.add("watch.retry_after", "%s; use %s to %s (default %s)", w.RetryAfter, MinWatchRetryAfter, MaxWatchRetryAfter, DefaultWatchRetryAfter)
	}
	n := w.Notifications
	if n == nil {
		return
	}
	if !strings.HasPrefix(d.Source.Files.URL, "s3://") {
		v.add("watch.notifications", "only an s3:// source has event notifications; remove notifications (the listing every %s stays)", w.Every)
	}
	if !watchSubject(n.Subject) {
		v.add("watch.notifications.subject", "%q is not a NATS subject; write tokens separated by \".\" (\"*\" and \">\" as whole tokens), e.g. s3.events.landing", n.Subject)
		return
	}
	for _, own := range []string{c.NATS.SubjectPrefix, schemas.BackfillPrefix(c.NATS.SubjectPrefix), c.NATS.DLQSubjectPrefix, c.NATS.Results.SubjectPrefix} {
		if own != "" && subjectsMeet(n.Subject, own+".>") {
			v.add("watch.notifications.subject", "%q shares subjects with %s.>, where idem's own streams capture them; use a subject of the store's own, e.g. s3.events.landing", n.Subject, own)
		}
	}
}

// watchSubject reports whether s is a subject one can subscribe to.
func watchSubject(s string) bool {
	if s == "" {
		return false
	}
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		switch {
		case tok == "" || strings.ContainsAny(tok, " \t\r\n"):
			return false
		case tok == ">" && i != len(toks)-1:
			return false
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return false
		}
	}
	return true
}

// subjectsMeet reports whether two subjects, wildcards allowed, match a
// subject in common.
func subjectsMeet(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) || i == len(bt):
			return len(at) == len(bt)
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}

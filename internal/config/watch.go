package config

import (
	"strings"
	"time"

	"github.com/idem-data/idem/schemas"
)

// Watch: every Every, idem lists the newest partitions of a files: source
// and publishes the event of each one complete (its ready rule holds) that
// never loaded, or whose files differ from its last successful load's.
type Watch struct {
	// Every is how often the partitions are listed; at least MinWatchEvery.
	Every Duration `yaml:"every,omitempty"`
	// Last is how many are listed: the current partition and those before
	// it, of the calendar (expect) or else UTC days or hours; at most
	// MaxWatchLast.
	Last int `yaml:"last,omitempty"`
	// Notifications are S3 event notifications on NATS: one naming a
	// partition's file lists that partition at once. The listing every
	// Every stays: notifications can be lost.
	Notifications *WatchNotifications `yaml:"notifications,omitempty"`
}

// WatchNotifications says where S3 event notifications arrive.
type WatchNotifications struct {
	// Subject is the core NATS subject (wildcards allowed) the object
	// store publishes them on.
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
	for _, own := range []string{c.NATS.SubjectPrefix, c.NATS.DLQSubjectPrefix, c.NATS.Results.SubjectPrefix} {
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

package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/clock"
	"github.com/idem-data/idem/internal/defaults"
)

// Fleet defaults.
const (
	// DefaultFleetRefresh is how often a replica rewrites its entry in the
	// fleet bucket; an entry older than three refreshes has expired (the
	// bucket's MaxAge), so a replica that died drops out within 30 s.
	DefaultFleetRefresh = 10 * time.Second
	// DefaultUnknownGrace is how long an event for a dataset that no live
	// replica knows waits (a config still rolling out) before it is
	// dead-lettered as fatal: long enough for a rolling deploy, short enough
	// that a publisher's typo pages someone the same hour.
	DefaultUnknownGrace = defaults.UnknownDatasetGrace
	// fleetNakDelay is the mean redelivery delay of an event left for
	// another replica or for the rollout (see fleetDelay).
	fleetNakDelay = 2 * time.Second
	// fleetCacheFor bounds how stale the view of the fleet may be when an
	// unknown dataset is looked up.
	fleetCacheFor = 2 * time.Second
)

// Member is one live replica's entry in the fleet bucket.
type Member struct {
	Replica  string   `json:"replica"`
	Version  string   `json:"version"` // the config's version (a hash)
	Datasets []string `json:"datasets"`
	// Updated is when the replica wrote the entry, by its own clock: shown,
	// never compared. Liveness is judged by Stored.
	Updated time.Time `json:"updated"`
	// Stored is when the bucket stored the entry, by the NATS server's
	// clock, so that no replica's clock decides whether another is alive.
	Stored time.Time `json:"-"`
	// Definitions holds each dataset's definition as its caller wrote it,
	// so that a new config can be compared with the one the fleet runs
	// (`idem validate --fleet`). The consumer never reads it; replicas of
	// older versions leave it empty.
	Definitions map[string]json.RawMessage `json:"definitions,omitempty"`
}

// FleetConfig names the bucket where the replicas of one consumer say which
// datasets they know, so that an event for a dataset this replica does not
// know yet (a config rolling out) is left for one that does instead of
// being dead-lettered.
type FleetConfig struct {
	// Bucket is the key-value bucket, shared by every replica of the
	// durable consumer. Required to enable the fleet.
	Bucket string
	// Replica names this process, unique in the fleet (host and pid).
	Replica string
	// Version is the config's version, reported to the fleet.
	Version string
	// Refresh and Grace default to DefaultFleetRefresh and
	// DefaultUnknownGrace.
	Refresh time.Duration
	Grace   time.Duration
	// Definitions is copied into this replica's entry (Member.Definitions).
	Definitions map[string]json.RawMessage
}

// fleet keeps this replica's entry fresh and answers whether some live
// replica knows a dataset.
type fleet struct {
	cfg    FleetConfig
	kv     jetstream.KeyValue
	selfMu sync.Mutex
	self   Member
	log    zerolog.Logger

	mu      sync.Mutex
	members []Member
	read    time.Time

	// The NATS server's clock, as this replica's last refresh read it: the
	// time the bucket stored the entry, and this process's monotonic
	// reading right after (serverNow).
	clockMu   sync.Mutex
	serverAt  time.Time
	readLocal time.Time
}

// EnsureFleet creates the fleet bucket when missing (`idem streams`, and
// `idem serve` when its permissions allow) and returns it.
func EnsureFleet(ctx context.Context, js jetstream.JetStream, cfg FleetConfig) (jetstream.KeyValue, error) {
	setDuration(&cfg.Refresh, DefaultFleetRefresh)
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      cfg.Bucket,
			Description: "idem: the datasets each live replica knows",
			TTL:         3 * cfg.Refresh,
			History:     1,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

// openFleet opens the bucket (creating it when missing) and writes this
// replica's entry.
func openFleet(ctx context.Context, js jetstream.JetStream, cfg FleetConfig, datasets []string, log zerolog.Logger) (*fleet, error) {
	setDuration(&cfg.Refresh, DefaultFleetRefresh)
	setDuration(&cfg.Grace, DefaultUnknownGrace)
	kv, err := EnsureFleet(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	slices.Sort(datasets)
	f := &fleet{cfg: cfg, kv: kv, log: log, self: Member{
		Replica: cfg.Replica, Version: cfg.Version, Datasets: datasets, Definitions: cfg.Definitions,
	}}
	if err := f.publish(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// key is the replica's key: NATS keys allow [-/_=.a-zA-Z0-9].
func (f *fleet) key() string {
	b := []byte(f.cfg.Replica)
	for i, c := range b {
		ok := c == '-' || c == '_' || c == '=' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

func (f *fleet) publish(ctx context.Context) error {
	f.selfMu.Lock()
	m := f.self
	f.selfMu.Unlock()
	m.Updated = clock.Local().UTC()
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := f.kv.Put(ctx, f.key(), b); err != nil {
		return err
	}
	if e, err := f.kv.Get(ctx, f.key()); err == nil {
		f.clockMu.Lock()
		f.serverAt, f.readLocal = e.Created(), time.Now()
		f.clockMu.Unlock()
	}
	return nil
}

// serverNow is the NATS server's clock now, as far as this replica can
// tell: the time its last refresh was stored, plus the time passed since
// by this process's monotonic clock. A step of the local wall clock (NTP
// after a VM is restored from a snapshot) moves neither; before the first
// refresh is read back it is the local clock.
func (f *fleet) serverNow() time.Time {
	f.clockMu.Lock()
	defer f.clockMu.Unlock()
	if f.serverAt.IsZero() {
		return clock.Local()
	}
	return f.serverAt.Add(time.Since(f.readLocal))
}

// run refreshes the entry until ctx ends, then removes it: a replica that
// stops leaves the fleet at once, one that dies within the bucket's TTL.
func (f *fleet) run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = f.kv.Delete(dctx, f.key())
			cancel()
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, f.cfg.Refresh)
			if err := f.publish(pctx); err != nil && ctx.Err() == nil {
				f.log.Warn().Err(err).Str("bucket", f.cfg.Bucket).Msg("fleet entry not refreshed")
			}
			cancel()
		}
	}
}

// knows reports whether a live replica other than this one knows dataset,
// and the members seen.
func (f *fleet) knows(ctx context.Context, dataset string) (bool, error) {
	members, err := f.view(ctx, false)
	if err != nil {
		return false, err
	}
	now := f.serverNow()
	for _, m := range members {
		if m.Replica != f.cfg.Replica && now.Sub(m.Stored) < 3*f.cfg.Refresh {
			if _, ok := slices.BinarySearch(m.Datasets, dataset); ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// view lists the live members, read at most every fleetCacheFor unless
// fresh asks for a read now.
func (f *fleet) view(ctx context.Context, fresh bool) ([]Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !fresh && time.Since(f.read) < fleetCacheFor {
		return f.members, nil
	}
	out, err := readMembers(ctx, f.kv)
	if err != nil {
		return nil, err
	}
	f.members, f.read = out, time.Now()
	return out, nil
}

// ReadFleet lists the live replicas in bucket, sorted by name, without a
// running Consumer (`idem validate --fleet`). An entry stored three
// DefaultFleetRefresh before the newest one is not live, even when the
// bucket still holds it: both times are the NATS server's, so neither this
// host's clock nor a replica's decides. A missing bucket is
// jetstream.ErrBucketNotFound.
func ReadFleet(ctx context.Context, js jetstream.JetStream, bucket string) ([]Member, error) {
	return readFleet(ctx, js, bucket, DefaultFleetRefresh)
}

func readFleet(ctx context.Context, js jetstream.JetStream, bucket string, refresh time.Duration) ([]Member, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	all, err := readMembers(ctx, kv)
	if err != nil {
		return nil, err
	}
	var newest time.Time
	for _, m := range all {
		if m.Stored.After(newest) {
			newest = m.Stored
		}
	}
	live := all[:0]
	for _, m := range all {
		if newest.Sub(m.Stored) < 3*refresh {
			live = append(live, m)
		}
	}
	slices.SortFunc(live, func(a, b Member) int { return strings.Compare(a.Replica, b.Replica) })
	return live, nil
}

// readMembers reads every entry of the bucket, datasets sorted.
func readMembers(ctx context.Context, kv jetstream.KeyValue) ([]Member, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Member
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // expired or deleted meanwhile
		}
		var m Member
		if json.Unmarshal(e.Value(), &m) == nil {
			m.Stored = e.Created()
			slices.Sort(m.Datasets)
			out = append(out, m)
		}
	}
	return out, nil
}

// update replaces this replica's datasets, version and definitions after a
// reload, and tells the fleet at once.
func (f *fleet) update(ctx context.Context, datasets []string, version string, defs map[string]json.RawMessage) error {
	slices.Sort(datasets)
	f.selfMu.Lock()
	f.self.Datasets, f.self.Version, f.self.Definitions = datasets, version, defs
	f.selfMu.Unlock()
	return f.publish(ctx)
}

// fleetDelay is the redelivery delay of an event left for another replica:
// fleetNakDelay, jittered by half either way. Which replica wins the
// redelivery is decided by the order their pull requests wait in, which
// pullWait's jitter keeps changing; this delay only spreads the
// redeliveries of many such events.
func fleetDelay(jitter float64) time.Duration {
	return fleetNakDelay/2 + time.Duration(jitter*float64(fleetNakDelay))
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/localpg"
)

// A failover as asynchronous replication makes it lose commits in
// production: the standby stops receiving WAL (it is stopped here) while
// loads go on and are acknowledged, the primary dies (SIGKILL), the standby
// starts again with only what it had and is promoted, and the address idem
// connects to (the Toxiproxy proxy, as a virtual IP or HAProxy would) leads
// to it from then on. idem's config does not change and no process is
// restarted: idem must notice the new server, load again the acknowledged
// loads it lost, and go on. The dead primary's place (its port and data
// directory) then holds a new standby of the new primary, for the next
// failover.
const (
	// failoverLagMin and failoverLagMax bound how long the standby is
	// stopped before the primary dies: the commits of that time (a few
	// dozen loads at the campaign's pace) are what the promotion loses.
	failoverLagMin = 1 * time.Second
	failoverLagMax = 3 * time.Second
	// failoverPlan is the time the schedule sets aside after the lag for
	// the kill, the start and promotion of the standby, the new standby
	// (a base backup of a small cluster) and idem's next load, which comes
	// within a probe delay of a seconds-long outage. The real one takes
	// what it takes; later faults wait for it.
	failoverPlan = 5 * time.Second
	// failoverKillMargin is how long after the kill a dead letter may still
	// come from the load the kill ended; later in the outage, one is an
	// outage's (failoverOutage).
	failoverKillMargin = 2 * time.Second
)

// failoverOutage names, in the checker's windows, a failover's outage
// after the kill: no server takes writes at idem's address until the
// promotion, and idem must hold its messages through it as through any
// outage. The failover window itself is a fault that ends loads.
const failoverOutage = "failover_outage"

// warehouse is the campaign's PostgreSQL: the caller's cluster alone, or,
// when the schedule holds failovers, the caller's cluster and a streaming
// standby of it in a place of the campaign's own, whose roles swap at each
// failover. close hands the caller's cluster back as the primary.
type warehouse struct {
	places [2]*localpg.Server // [0] is the caller's cluster
	cur    int                // the primary's place
}

// replicationSettings are set on the caller's cluster (ALTER SYSTEM) while
// it has a standby, and reset by close; base backups carry them to every
// standby, for when it is the primary. wal_keep_size: without a
// replication slot, a standby that reconnects after the primary's crash
// restart (pg_immediate) must still find the segments it lacks.
// wal_retrieve_retry_interval: a standby waits that long between tries to
// fetch WAL, and a promotion asked meanwhile waits for the try (5 s by
// default): the promotion's latency would be a draw of PostgreSQL's, not
// of the seed.
var replicationSettings = []string{"wal_keep_size = '512MB'", "wal_retrieve_retry_interval = '200ms'"}

// newWarehouse makes the standby when standby is true.
func newWarehouse(ctx context.Context, pg *localpg.Server, standby bool, logf func(string, ...any)) (*warehouse, error) {
	w := &warehouse{places: [2]*localpg.Server{pg}}
	if !standby {
		return w, nil
	}
	if err := w.configure(ctx, true); err != nil {
		return nil, err
	}
	st, err := pg.Standby(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("chaos: standby: %w", err)
	}
	w.places[1] = st
	logf("chaos: PostgreSQL on port %d, its streaming standby on port %d", pg.Port, st.Port)
	return w, nil
}

func (w *warehouse) primary() *localpg.Server { return w.places[w.cur] }

// standby is nil without failovers.
func (w *warehouse) standby() *localpg.Server { return w.places[1-w.cur] }

// addr is where the primary listens: the proxy's upstream.
func (w *warehouse) addr() string { return fmt.Sprintf("127.0.0.1:%d", w.primary().Port) }

// url is the campaign's own connection string to database db (the
// checker, the publisher's staging changes, the reader, the nemesis):
// with a standby, both places and target_session_attrs=read-write, so that
// it reaches the current primary and only it, before and after every
// failover, without being told.
func (w *warehouse) url(db string) string {
	if w.places[1] == nil {
		return w.places[0].URL(db)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		w.places[0].Port, w.places[1].Port, url.PathEscape(db))
}

// configure sets (or resets) replicationSettings on the primary and
// reloads its config.
func (w *warehouse) configure(ctx context.Context, set bool) error {
	c, err := pgx.Connect(ctx, w.primary().URL(""))
	if err != nil {
		return fmt.Errorf("chaos: connect to the primary: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	for _, setting := range replicationSettings {
		sql := "ALTER SYSTEM SET " + setting
		if !set {
			name, _, _ := strings.Cut(setting, " ")
			sql = "ALTER SYSTEM RESET " + name
		}
		if _, err := c.Exec(ctx, sql); err != nil {
			return fmt.Errorf("chaos: %s: %w", sql, err)
		}
	}
	_, err = c.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// caughtUp waits until the standby has replayed everything the primary
// had written when it was called.
func (w *warehouse) caughtUp(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	p, err := pgx.Connect(ctx, w.primary().URL(""))
	if err != nil {
		return fmt.Errorf("chaos: connect to the primary: %w", err)
	}
	defer p.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := p.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("chaos: primary's WAL position: %w", err)
	}
	s, err := pgx.Connect(ctx, w.standby().URL(""))
	if err != nil {
		return fmt.Errorf("chaos: connect to the standby: %w", err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	for {
		var ok bool
		if err := s.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&ok); err != nil {
			return fmt.Errorf("chaos: the standby did not replay the primary's WAL up to %s: %w", lsn, err)
		}
		if ok {
			return nil
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// ledger reads the runs server s has in its ledger, on a connection of its
// own (not the campaign's pool, which follows the primary).
func ledgerOf(ctx context.Context, s *localpg.Server) (map[runKey]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL(dbName))
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, `SELECT task_id, partition_key, run_id FROM idem.run_ledger WHERE dag_id = $1`, pipeline)
	if err != nil {
		return nil, err
	}
	out := map[runKey]bool{}
	for rows.Next() {
		var k runKey
		if err := rows.Scan(&k.dataset, &k.partition, &k.runID); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

// close hands the caller's cluster back as the primary, as the campaign
// found it (the next campaign and the package's other tests use it), and
// removes the standby. After an odd number of failovers the caller's
// cluster is the standby: the primary is stopped (fast, so the standby
// receives its last WAL) and the standby promoted, a switchover.
func (w *warehouse) close(ctx context.Context) error {
	other := w.places[1]
	if other == nil {
		return nil
	}
	home := w.places[0]
	var errs []error
	if w.cur == 1 {
		if !home.Running() {
			// A failover that failed before the new standby was made.
			if err := home.Follow(ctx, other); err != nil {
				errs = append(errs, err)
			}
		}
		if err := other.Stop(ctx, "fast"); err != nil {
			errs = append(errs, err)
		}
		if err := home.Promote(ctx); err != nil {
			errs = append(errs, err)
		}
		w.cur = 0
	}
	if err := w.configure(ctx, false); err != nil {
		errs = append(errs, err)
	}
	// Close stops the standby (immediate) and removes its directory.
	if other.Running() {
		errs = append(errs, other.Close())
	} else {
		_ = other.Close() // nothing to stop: the directory goes
	}
	return errors.Join(errs...)
}

// failover runs one failover fault; see the comment at the top. Until the
// kill, a failure heals by starting the standby again; after it, one that
// leaves no primary ends the campaign (nemesis.run).
func (n *nemesis) failover(ctx, heal context.Context, f *fault) error {
	w := n.wh
	old, next := w.primary(), w.standby()
	if next == nil {
		f.Skipped = "no standby"
		return nil
	}
	step := func(d time.Duration) (context.Context, context.CancelFunc) { return context.WithTimeout(heal, d) }
	// The standby has everything so far: it misses exactly what commits
	// while it is stopped.
	if err := w.caughtUp(heal, time.Minute); err != nil {
		return err
	}
	sctx, cancel := step(2 * time.Minute)
	err := next.Stop(sctx, "fast")
	cancel()
	if err != nil {
		return err
	}
	// Loads go on, committed and acknowledged on the primary alone.
	sleepCtx(ctx, f.Hold)
	if ctx.Err() != nil {
		// The campaign is ending: heal without the failover.
		rctx, cancel := step(2 * time.Minute)
		defer cancel()
		return errors.Join(ctx.Err(), next.Restart(rctx, ""))
	}
	// What the primary has, read right before it dies: the loads that
	// commit between this read and the kill are lost too, uncounted.
	had, err := ledgerOf(heal, old)
	if err != nil {
		n.logf("chaos: failover: the primary's ledger not read: %v", err)
	}
	if err := old.Kill(); err != nil {
		rctx, cancel := step(2 * time.Minute)
		defer cancel()
		return errors.Join(fmt.Errorf("kill the primary: %w", err), next.Restart(rctx, ""))
	}
	f.Killed = time.Now()
	rctx, cancel := step(2 * time.Minute)
	defer cancel()
	if err := next.Restart(rctx, ""); err != nil {
		return fmt.Errorf("start the standby: %w", err)
	}
	if err := next.Promote(rctx); err != nil {
		return fmt.Errorf("promote the standby: %w", err)
	}
	w.cur = 1 - w.cur
	// Read before idem can reach the new primary: what the promotion kept.
	kept, err := ledgerOf(heal, next)
	if err != nil {
		n.logf("chaos: failover: the new primary's ledger not read: %v", err)
	} else if had != nil {
		for k := range had {
			if !kept[k] {
				f.lost = append(f.lost, k)
			}
		}
		f.LostLoads = len(f.lost)
	}
	if err := n.link.repoint(w.addr()); err != nil {
		return fmt.Errorf("re-point the proxy: %w", err)
	}
	f.Promoted = time.Now()
	f.Outage = f.Promoted.Sub(f.Killed)
	// The next failover's standby, at the dead primary's place. idem's
	// first load on the new primary is looked up afterwards, in the audit.
	if err := old.Follow(rctx, next); err != nil {
		return fmt.Errorf("a new standby at port %d: %w", old.Port, err)
	}
	f.Resumed = n.waitResumed(ctx, f.Promoted)
	n.logf("chaos: failover: port %d promoted, %d loads the old primary had are gone, new standby on port %d",
		next.Port, f.LostLoads, old.Port)
	return nil
}

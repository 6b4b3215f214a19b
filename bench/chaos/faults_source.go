package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/localpg"
)

// replica_source_failover (Options.PGSource): while idem copies rows from
// the source's standby, one of two things happens to the source, drawn
// from the seed and recorded in the fault's variant:
//
//	standby_restart/fast       the standby idem reads stopped with pg_ctl
//	standby_restart/immediate  -m fast (its sessions get 57P01 mid-COPY) or
//	                           -m immediate (a crash: the copy's connection
//	                           ends without a word), down 0-2 s, started
//	                           again; meanwhile the multi-host URL leads
//	                           idem to the primary; once it is back, its
//	                           replay is paused for 3-8 s (Lag) while it
//	                           receives WAL: a standby that lags, which
//	                           idem must not read past max_replica_lag
//	standby_promote            the primary fenced (pg_ctl stop -m fast, so
//	                           the standby receives its last WAL), the
//	                           standby promoted while copies stream from it,
//	                           and the old primary's place wiped and made
//	                           the new primary's standby (a base backup), so
//	                           that the next fault finds the same two places
//
// Before it acts, the nemesis waits (up to 3 s) until a copy of idem's
// (application_name idem-pgsource) is active on the node it is about to
// stop or promote, and records how many were (Param): the fault lands
// mid-COPY. idem must retry a cut copy, never load part of a partition,
// and keep max_replica_lag's promise while the standby catches up.
const (
	sourceRestartFast      = "standby_restart/fast"
	sourceRestartImmediate = "standby_restart/immediate"
	sourcePromote          = "standby_promote"
)

// sourceFaultParams draws a replica_source_failover's variant and, for a
// restart, how long the standby stays down.
func sourceFaultParams(f *fault, rng *rand.Rand) {
	switch rng.IntN(4) {
	case 0:
		f.Variant = sourceRestartFast
	case 1:
		f.Variant = sourceRestartImmediate
	default:
		f.Variant = sourcePromote
	}
	if f.Variant != sourcePromote {
		f.Hold = time.Duration(rng.IntN(2001)) * time.Millisecond
		f.Lag = time.Duration(3000+rng.IntN(5001)) * time.Millisecond
	}
}

// sourceFailover runs one replica_source_failover. A failure that leaves
// the source without a primary or a standby ends the campaign
// (nemesis.run).
func (n *nemesis) sourceFailover(ctx, heal context.Context, f *fault) error {
	s := n.src
	if s == nil {
		f.Skipped = "no PostgreSQL source (Options.PGSource)"
		return nil
	}
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(heal, 2*time.Minute) }
	st := s.standby()
	f.Param = copiesInFlight(ctx, st, 3*time.Second)
	s.mu.Lock()
	s.inFlight += f.Param
	s.mu.Unlock()
	switch f.Variant {
	case sourceRestartFast, sourceRestartImmediate:
		mode := "fast"
		if f.Variant == sourceRestartImmediate {
			mode = "immediate"
		}
		sctx, cancel := step()
		err := st.Stop(sctx, mode)
		cancel()
		if err != nil {
			return fmt.Errorf("stop the source's standby: %w", err)
		}
		down := time.Now()
		sleepCtx(ctx, f.Hold)
		rctx, cancel := step()
		defer cancel()
		err = st.Restart(rctx, "")
		f.Outage = time.Since(down)
		if err != nil {
			return fmt.Errorf("start the source's standby: %w", err)
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		if err := holdReplay(ctx, heal, st, f.Lag); err != nil {
			return fmt.Errorf("hold the source standby's replay: %w", err)
		}
		s.mu.Lock()
		s.held += f.Lag
		s.mu.Unlock()
		n.logf("chaos: %s: the source's standby on port %d %s, down %s, %d copies in flight, replay held %s",
			f.Kind, st.Port, f.Variant, f.Outage.Round(time.Millisecond), f.Param, f.Lag)
		return nil
	case sourcePromote:
		return n.sourcePromote(heal, f, s, st)
	}
	return fmt.Errorf("unknown variant %q", f.Variant)
}

// sourcePromote fences the source's primary, promotes its standby st and
// makes the old primary's place the new primary's standby.
func (n *nemesis) sourcePromote(heal context.Context, f *fault, s *sourceDB, st *localpg.Server) error {
	old := s.primary()
	ctx, cancel := context.WithTimeout(heal, 2*time.Minute)
	defer cancel()
	// Fast: the primary's walsender sends the standby everything up to the
	// shutdown checkpoint before it exits, so the promotion keeps every
	// commit; lostFixes says whether it did.
	if err := old.Stop(ctx, "fast"); err != nil {
		return fmt.Errorf("fence the source's primary: %w", err)
	}
	fenced := time.Now()
	if err := st.Promote(ctx); err != nil {
		return errors.Join(fmt.Errorf("promote the source's standby: %w", err), old.Restart(ctx, ""))
	}
	s.mu.Lock()
	s.cur = 1 - s.cur
	s.promotes++
	s.mu.Unlock()
	f.Outage = time.Since(fenced)
	f.Server = fmt.Sprintf("127.0.0.1:%d", st.Port)
	if err := old.Follow(ctx, st); err != nil {
		return fmt.Errorf("a new source standby on port %d: %w", old.Port, err)
	}
	n.logf("chaos: %s: source port %d promoted (%s without a primary), %d copies in flight on it, new standby on port %d",
		f.Kind, st.Port, f.Outage.Round(time.Millisecond), f.Param, old.Port)
	return nil
}

// copiesInFlight waits up to within for a copy of idem's to be active on
// node, and returns how many are; 0 if none came.
func copiesInFlight(ctx context.Context, node *localpg.Server, within time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	c, err := pgx.Connect(ctx, node.URL(srcDBName))
	if err != nil {
		return 0
	}
	defer c.Close(context.WithoutCancel(ctx))
	for ctx.Err() == nil {
		var k int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'idem-pgsource' AND state = 'active' AND query LIKE 'COPY%'`).Scan(&k)
		if err != nil {
			return 0
		}
		if k > 0 {
			return k
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return 0
}

// holdReplay pauses node's replay for d (it keeps receiving WAL), then
// resumes it, whatever ctx says.
func holdReplay(ctx, heal context.Context, node *localpg.Server, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	hctx, cancel := context.WithTimeout(heal, time.Minute)
	defer cancel()
	c, err := pgx.Connect(hctx, node.URL(srcDBName))
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(hctx))
	if _, err := c.Exec(hctx, "SELECT pg_wal_replay_pause()"); err != nil {
		return err
	}
	sleepCtx(ctx, d)
	_, err = c.Exec(hctx, "SELECT pg_wal_replay_resume()")
	return err
}

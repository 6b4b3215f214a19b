package pgsource

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pinned are the settings that decide how values are written as text, set
// on both sides of the copy (as pglogical's table sync and postgres_fdw do),
// so that what one server writes the other reads back as the same value,
// whatever the two databases default to: ISO dates read the same under any
// DateStyle, 3 extra float digits are exact, UTC offsets are explicit.
var pinned = []struct{ name, value string }{
	{"DateStyle", "ISO, MDY"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "3"},
	{"TimeZone", "UTC"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
	{"xmloption", "content"},
}

// beginSQL opens the source transaction: one snapshot for every statement
// (the snapshot query and the COPY), read only, with the pinned settings
// local to it (a pooler in transaction mode keeps them to this client) and
// standard_conforming_strings on, which the bound literals rely on.
var beginSQL = func() string {
	var b strings.Builder
	b.WriteString("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;\nSET LOCAL standard_conforming_strings = on;\n")
	for _, p := range pinned {
		b.WriteString("SET LOCAL " + p.name + " = '" + p.value + "';\n")
	}
	return b.String()
}()

// Source is what a copy learnt about the server it read and the snapshot it
// read from, for the audit.
type Source struct {
	// Addr is Spec.Addr: the server as the URL names it.
	Addr string
	// SystemIdentifier is the cluster's identifier (pg_control_system()),
	// shared by a primary and its standbys; "" when the role may not read it.
	SystemIdentifier string
	// ServerAddr is inet_server_addr():inet_server_port(), the server as it
	// sees itself ("local" over a Unix socket).
	ServerAddr string
	// Version is server_version_num, e.g. 150018.
	Version int
	// InRecovery is pg_is_in_recovery(): the source is a standby.
	InRecovery bool
	// LSN is where the snapshot stands in the WAL: the replay position on a
	// standby, the current insert position on a primary.
	LSN string
	// ReplayedAt, on a standby, is the primary's commit time of the last
	// transaction replayed when the snapshot was taken: the snapshot holds
	// everything the primary committed up to then. Zero on a primary.
	ReplayedAt time.Time
	// Lag is how far replay was behind when the snapshot was taken: 0 on a
	// primary and on a streaming standby that had replayed all it received,
	// now() - ReplayedAt otherwise, -1 when the standby had replayed no
	// transaction yet.
	Lag time.Duration
}

// session is one attempt's dedicated connection to the source.
type session struct {
	conn   *pgx.Conn
	addr   string
	secret string // the password, scrubbed from every message
}

// connect opens a dedicated connection to the source. It uses the simple
// protocol only (no prepared statements, for poolers in front of a
// standby), and names itself idem-pgsource unless the URL names it.
func connect(ctx context.Context, spec Spec) (*session, error) {
	cfg, err := pgx.ParseConfig(spec.URL)
	if err != nil {
		return nil, classify(ctx, err, spec.Addr(), "connect", "")
	}
	s := &session{addr: addrOf(&cfg.Config), secret: cfg.Password}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "idem-pgsource"
	}
	s.conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classify(ctx, err, s.addr, "connect", s.secret)
	}
	return s, nil
}

// close ends the connection, and with it the source transaction (read only:
// nothing to commit), even when ctx is already cancelled.
func (s *session) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.conn.Close(ctx)
}

// fail classifies a source error, except a recovery conflict, which
// withSource must see as it came to decide on a retry.
func (s *session) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() == nil && isRecoveryConflict(err) {
		return err
	}
	return classify(ctx, err, s.addr, op, s.secret)
}

// How the lag gate samples a standby before it says wait: replay that is
// behind only for a moment (a record that has just arrived) catches up
// within these.
const (
	lagSamples   = 5
	lagSampleGap = 100 * time.Millisecond
)

// caughtUpSQL says a standby has replayed all the WAL it received and is
// receiving more: a WAL receiver runs (every role sees its pid) and, where
// the role may see it (pg_read_all_stats), streams and has replayed up to
// the end of its primary's WAL as the primary last reported it
// (latest_end_lsn). Without a receiver, a standby cut off from its primary
// would look caught up forever. Replay may stand past the received
// position: a restarted standby streams again from the start of the WAL
// segment it stands in, so until its primary writes again it has received
// less than it replayed (from its own WAL). That alone said "caught up"
// too of a standby restarted while its primary kept writing, until the
// new WAL arrived, and a load could read the old snapshot: the primary's
// reported end, ahead of the replay, tells the two apart.
const caughtUpSQL = `coalesce(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()
    AND EXISTS (SELECT FROM pg_stat_wal_receiver WHERE pid IS NOT NULL AND coalesce(status, 'streaming') = 'streaming'
                AND (status IS NULL OR pg_last_wal_replay_lsn() >= latest_end_lsn)), false)`

// lagSQL reads a standby's replay: in recovery, caught up (caughtUpSQL),
// now() - the primary's commit time of the last replayed transaction, and
// that commit time. Times are microseconds, so that no DateStyle of the
// session (it runs before the pins) changes how they read.
const lagSQL = `SELECT pg_is_in_recovery(),
  ` + caughtUpSQL + `,
  (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000000)::bigint,
  (extract(epoch FROM pg_last_xact_replay_timestamp()) * 1000000)::bigint`

// lag is a standby's replay lag as lagSQL measures it: 0 on a primary or
// when replay has applied everything a streaming standby received, so an
// idle primary, whose last commit grows old, is not mistaken for lag; -1
// when nothing was replayed yet.
func lag(inRecovery, caughtUp bool, us *int64) time.Duration {
	switch {
	case !inRecovery || caughtUp:
		return 0
	case us == nil:
		return -1
	}
	return max(time.Duration(*us)*time.Microsecond, 0)
}

// gate returns a *LagError when the source is a standby whose replay is
// behind by more than limit for every one of lagSamples samples. It runs
// before the snapshot is taken, so the snapshot is at least as fresh as the
// sample that passed. A limit of 0 passes at once.
func (s *session) gate(ctx context.Context, limit time.Duration) error {
	if limit <= 0 {
		return nil
	}
	for sample := 1; ; sample++ {
		var inRecovery, caughtUp bool
		var us, replayedAt *int64
		if err := s.conn.QueryRow(ctx, lagSQL).Scan(&inRecovery, &caughtUp, &us, &replayedAt); err != nil {
			return s.fail(ctx, "gate", err)
		}
		l := lag(inRecovery, caughtUp, us)
		if l >= 0 && l <= limit {
			return nil
		}
		if sample == lagSamples {
			return &LagError{Source: s.addr, Lag: l, Limit: limit, ReplayedAt: fromMicros(replayedAt)}
		}
		select {
		case <-ctx.Done():
			return s.fail(ctx, "gate", ctx.Err())
		case <-time.After(lagSampleGap):
		}
	}
}

// snapshotSQL is the source transaction's first statement, which takes its
// snapshot, and says what that snapshot is.
const snapshotSQL = `SELECT pg_is_in_recovery(),
  (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text,
  ` + caughtUpSQL + `,
  (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000000)::bigint,
  (extract(epoch FROM pg_last_xact_replay_timestamp()) * 1000000)::bigint,
  coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local'),
  current_setting('server_version_num')::int,
  CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
    THEN (SELECT system_identifier::text FROM pg_catalog.pg_control_system()) END`

// begin opens the source transaction and takes its snapshot.
func (s *session) begin(ctx context.Context) (Source, error) {
	if _, err := s.conn.Exec(ctx, beginSQL); err != nil {
		return Source{}, s.fail(ctx, "begin", err)
	}
	src := Source{Addr: s.addr}
	var caughtUp bool
	var us, replayedAt *int64
	var sysID *string
	err := s.conn.QueryRow(ctx, snapshotSQL).Scan(&src.InRecovery, &src.LSN, &caughtUp, &us, &replayedAt,
		&src.ServerAddr, &src.Version, &sysID)
	if err != nil {
		return Source{}, s.fail(ctx, "snapshot", err)
	}
	if sysID != nil {
		src.SystemIdentifier = *sysID
	}
	if src.InRecovery {
		src.Lag = lag(true, caughtUp, us)
		src.ReplayedAt = fromMicros(replayedAt)
	}
	return src, nil
}

// withSource runs fn on a fresh source session, gated and in its snapshot,
// and runs it again after a recovery conflict while spec's budget lasts.
// fn reports the source's errors as they came (so conflicts are seen) and
// the destination's wrapped in dstError (never retried here). It returns
// the number of attempts that ran.
func withSource(ctx context.Context, spec Spec, fn func(s *session, src Source) error) (int, error) {
	budget := spec.retries()
	for attempt := 1; ; attempt++ {
		err := once(ctx, spec, fn)
		var dst *dstError
		switch {
		case err == nil:
			return attempt, nil
		case errors.As(err, &dst):
			return attempt, dst.err
		case ctx.Err() != nil || !isRecoveryConflict(err):
			return attempt, err
		case attempt > budget:
			code, msg := conflictMessage(err, "")
			return attempt, &RecoveryConflictError{Source: spec.Addr(), Attempts: attempt, SQLState: code, Message: msg}
		}
		// Replay goes on as soon as the query is cancelled; a moment later
		// the rows it removed are gone from the next snapshot too.
		select {
		case <-ctx.Done():
			return attempt, classify(ctx, ctx.Err(), spec.Addr(), "copy", "")
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// once is one attempt of withSource. A recovery conflict comes back as the
// driver's error; every other source error comes back classified.
func once(ctx context.Context, spec Spec, fn func(s *session, src Source) error) error {
	s, err := connect(ctx, spec)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	if err := s.gate(ctx, spec.MaxReplicaLag); err != nil {
		return err
	}
	src, err := s.begin(ctx)
	if err != nil {
		return err
	}
	if testHookAfterSnapshot != nil {
		testHookAfterSnapshot()
	}
	err = fn(s, src)
	var dst *dstError
	if err == nil || errors.As(err, &dst) {
		return err
	}
	return s.fail(ctx, "copy", err)
}

// testHookAfterSnapshot, when set by a test, runs once the source's
// snapshot is taken, before the rows are read.
var testHookAfterSnapshot func()

// dstError carries an error of the destination (the caller's transaction)
// through withSource untouched: it is the warehouse's, for the caller to
// classify, and never a reason to read the source again.
type dstError struct{ err error }

func (e *dstError) Error() string { return e.err.Error() }
func (e *dstError) Unwrap() error { return e.err }

// fromMicros is a time given in microseconds since the Unix epoch, in UTC;
// zero for NULL.
func fromMicros(us *int64) time.Time {
	if us == nil {
		return time.Time{}
	}
	return time.UnixMicro(*us).UTC()
}

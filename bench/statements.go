package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/localpg"
)

// (j) Statement modes: the same small events and big loads through `idem
// serve` with postgres.statement_mode prepare and describe, and pgx's exec
// mode (through the URL), against PostgreSQL itself, and auto through a
// real PgBouncer in transaction
// pooling (which idem resolves to describe), the four taking turns.

// The ways (j) runs idem: a statement mode, and where idem connects.
const (
	StmPrepare  = "prepare"        // statement_mode prepare, PostgreSQL directly
	StmDescribe = "describe"       // statement_mode describe, PostgreSQL directly
	StmExec     = "exec"           // pgx's exec mode through the URL, PostgreSQL directly
	StmPooled   = "pgbouncer_auto" // statement_mode auto, through PgBouncer (transaction pooling)
)

// stmWay is one way of (j): the statement_mode the config sets ("" for
// auto), whether idem goes through the pooler, and the mode idem must say
// it resolved to at start (else the run measured something else).
type stmWay struct {
	key, mode string
	pooled    bool
	want      string
}

var stmWays = []stmWay{
	{StmPrepare, config.StatementPrepare, false, config.StatementPrepare},
	{StmDescribe, config.StatementDescribe, false, config.StatementDescribe},
	// pgx's exec mode is no statement_mode (it binds a []byte as bytea,
	// and idem passes JSON so): measured through the URL, which idem
	// keeps under auto.
	{StmExec, "", false, "exec"},
	{StmPooled, "", true, config.StatementDescribe},
}

// StatementModesResult is (j).
type StatementModesResult struct {
	// Events per small run; Reps turns of every way.
	Events int `json:"events"`
	Reps   int `json:"reps"`
	// Pooler is the PgBouncer of the pooled way, e.g. "PgBouncer 1.18.0,
	// pool_mode transaction" ("" when none was found: its rows are empty).
	Pooler string `json:"pooler,omitempty"`
	// Routes are what idem said at start, by way: what stands in front of
	// PostgreSQL and the statement mode in force.
	Routes map[string]string     `json:"routes"`
	Small  []StatementModesSmall `json:"small"`
	Big    []StatementModesBig   `json:"big"`
	// From is the run that measured these figures when a report took them
	// from another results file (idembench -statements).
	From *RunRef `json:"from,omitempty"`
}

// StatementModesSmall is (j)'s 10-row partitions at one max_in_flight:
// each way's runs (events/s) and CPU per event.
type StatementModesSmall struct {
	InFlight int                `json:"in_flight"`
	Ways     map[string]*Method `json:"ways"`
}

// StatementModesBig is (j)'s loads of one partition size, by way, in the
// order they ran.
type StatementModesBig struct {
	Rows  int             `json:"rows"`
	Label string          `json:"label"`
	Ways  map[string][]Op `json:"ways"`
}

const stmTables = "stm_small"

func stmBigDS(l string) dataset {
	return dataset{Name: "stm_" + l, Strategy: "delete_insert", Target: "bench.stm_" + l, PartitionColumn: "event_date",
		Source: "SELECT " + rowCols + " FROM bench.stm_src_" + l + " WHERE event_date = @partition"}
}

// runStatements is (j): for every rep, at each max_in_flight, each way in
// turn (the order rotating) through an `idem serve` of its own: a warm-up,
// the small events, and at the first max_in_flight the big loads.
func (e *env) runStatements(ctx context.Context) error {
	sz := e.sizes
	if len(sz.StatementsInFlight) == 0 {
		return nil
	}
	p := sz.Partitions
	out := &StatementModesResult{Events: min(sz.Events, p-1), Reps: max(sz.StatementsReps, 1), Routes: map[string]string{}}
	e.res.StatementModes = out
	e.logf("statement modes: %d partitions of 10 rows; big loads of %s rows", p, joinInts(sz.StatementsBig))
	if err := e.smallTables(ctx, e.pool, stmTables, p); err != nil {
		return err
	}
	dss := []dataset{smallDataset(stmTables, stmTables)}
	for _, n := range sz.StatementsBig {
		l := labelRows(n)
		if err := e.rerunTables(ctx, "bench.stm_src_"+l, "bench.stm_"+l, n); err != nil {
			return err
		}
		dss = append(dss, stmBigDS(l))
		out.Big = append(out.Big, StatementModesBig{Rows: n, Label: l, Ways: map[string][]Op{}})
	}
	for _, c := range sz.StatementsInFlight {
		out.Small = append(out.Small, StatementModesSmall{InFlight: c, Ways: map[string]*Method{}})
	}

	// Behind a pooler idem sends no session settings at connect: they are
	// its role's (deploy/postgres/grants.sql), here for this database only,
	// until the phase ends, and set before the pooler opens a server
	// connection. Connected directly, idem's startup packet sets the same,
	// so every way runs under them.
	db := pgx.Identifier{e.dbName}.Sanitize()
	if err := e.exec(ctx, "ALTER ROLE CURRENT_USER IN DATABASE "+db+" SET synchronous_commit = off",
		"ALTER ROLE CURRENT_USER IN DATABASE "+db+" SET jit = off"); err != nil {
		return fmt.Errorf("idem's role settings, as grants.sql sets them: %w", err)
	}
	defer func() {
		_ = e.exec(context.WithoutCancel(ctx), "ALTER ROLE CURRENT_USER IN DATABASE "+db+" RESET ALL")
	}()
	ways := stmWays
	// Not under the harness's work directory: that is root's and closed to
	// the postgres user pgbouncer runs as.
	bouncer, err := localpg.StartPgBouncer(ctx, e.dbURL, localpg.PoolTransaction, "")
	switch {
	case errors.Is(err, localpg.ErrNoPgBouncer):
		e.res.note("statement modes: %v; the PgBouncer rows are empty", err)
		ways = ways[:len(ways)-1]
	case err != nil:
		return fmt.Errorf("pgbouncer: %w", err)
	default:
		defer func() { _ = bouncer.Close() }()
		out.Pooler = bouncer.Version + ", pool_mode " + bouncer.Mode
		if err := sessionSettingsOff(ctx, bouncer.URL(e.dbName)); err != nil {
			return err
		}
		e.poolerPid = bouncer.Pid()
		defer func() { e.poolerPid = 0 }()
	}

	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	bigs := make([]*big, len(sz.StatementsBig))
	for i, n := range sz.StatementsBig {
		bigs[i] = &big{env: e, conn: conn, rows: n, l: labelRows(n)}
	}
	for rep := range out.Reps {
		for ci, c := range sz.StatementsInFlight {
			e.sampleLoad(fmt.Sprintf("statements c=%d r%d", c, rep+1))
			for turn := range ways {
				w := ways[(rep+turn)%len(ways)]
				url := ""
				switch {
				case w.pooled:
					url = bouncer.URL(e.dbName)
				case w.key == StmExec:
					url = withQueryExecMode(e.dbURL, "exec")
				}
				run := stmRun{way: w, url: url, c: c, rep: rep, small: &out.Small[ci]}
				if ci == 0 {
					run.bigs = bigs
				}
				if err := e.stmRun(ctx, out, run, dss); err != nil {
					return fmt.Errorf("%s at max_in_flight %d, rep %d: %w", w.key, c, rep+1, err)
				}
			}
		}
	}
	for _, pt := range out.Small {
		for _, w := range ways {
			if m := pt.Ways[w.key]; m != nil {
				e.logf("statement modes c=%d: %s %.0f events/s, %s prepare's", pt.InFlight, w.key, m.Throughput.PerSec, pt.paired(w.key))
			}
		}
	}
	return nil
}

// stmRun is one turn of one way: an idem serve at max_in_flight c, the
// small events into small, and the loads of bigs (none: no big loads).
type stmRun struct {
	way   stmWay
	url   string
	c     int
	rep   int
	small *StatementModesSmall
	bigs  []*big
}

func (e *env) stmRun(ctx context.Context, out *StatementModesResult, r stmRun, dss []dataset) error {
	w := r.way
	name := fmt.Sprintf("stm-%s-c%02d-r%02d", w.key, r.c, r.rep)
	restore := e.serveThrough(serveRoute{url: r.url, statementMode: w.mode})
	proc, err := e.startIdem(ctx, name, r.c, dss)
	restore()
	if err != nil {
		return err
	}
	defer proc.kill()
	// A run in another mode than its row says would measure nothing.
	route, mode, err := proc.connected()
	if err != nil {
		return err
	}
	if mode != w.want {
		return fmt.Errorf("idem serve runs statement_mode %q, want %q (%s)", mode, w.want, route)
	}
	out.Routes[w.key] = route

	s := &small{env: e}
	ds := dss[0].Name
	warm := name + "-warm"
	if _, err := s.idemRun(ctx, proc, []event{{ds, dayKey(smallBase, e.sizes.Partitions-1), warm}}, warm, audit.StatusSuccess); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for _, b := range r.bigs {
		b.proc = proc
		if _, err := b.idem(ctx, stmBigDS(b.l).Name, warmDay); err != nil {
			return fmt.Errorf("warm-up %s: %w", b.l, err)
		}
	}
	if err := e.settle(ctx, "bench."+stmTables+"_t", "idem.pipeline_audit", "idem.run_ledger"); err != nil {
		return err
	}
	m := r.small.Ways[w.key]
	if m == nil {
		m = &Method{}
		r.small.Ways[w.key] = m
	}
	n := out.Events
	err = e.withCPU(m, proc.cmd.Process.Pid, n, false, func() error {
		el, err := s.idemRun(ctx, proc, eventsOf(ds, name, n), name, audit.StatusSuccess)
		if err == nil {
			m.Throughput.add(n, el)
		}
		return err
	})
	if err != nil {
		return err
	}
	for i, b := range r.bigs {
		d := stmBigDS(b.l)
		// Every load starts from the same table (b.idem checkpoints).
		if err := e.exec(ctx, "VACUUM (ANALYZE) "+d.Target); err != nil {
			return err
		}
		op, err := b.idem(ctx, d.Name, 0)
		if err != nil {
			return err
		}
		if op.Rows != int64(b.rows) {
			return fmt.Errorf("%s loaded %d rows, want %d", op.Run, op.Rows, b.rows)
		}
		bs := &out.Big[i]
		bs.Ways[w.key] = append(bs.Ways[w.key], op)
	}
	var loads []string
	for i := range r.bigs {
		ops := out.Big[i].Ways[w.key]
		loads = append(loads, fmt.Sprintf("%s %.3f s", out.Big[i].Label, ops[len(ops)-1].Ms/1000))
	}
	e.logf("statement modes c=%d rep %d: %s %.0f events/s %s", r.c, r.rep+1, w.key, m.Throughput.Runs[len(m.Throughput.Runs)-1], strings.Join(loads, ", "))
	if err := proc.stop(); err != nil {
		return err
	}
	for i, b := range r.bigs {
		ops := out.Big[i].Ways[w.key]
		ops[len(ops)-1].Route = proc.route(ops[len(ops)-1].Run)
		b.proc = nil
	}
	return nil
}

// sessionSettingsOff checks a session through the pooler has the settings
// idem's pool sets when it connects directly.
func sessionSettingsOff(ctx context.Context, url string) error {
	c, err := localpg.ConnectSimple(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var sc, jit string
	if err := c.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('jit')").Scan(&sc, &jit); err != nil {
		return err
	}
	if sc != "off" || jit != "off" {
		return fmt.Errorf("through the pooler synchronous_commit is %s and jit %s: idem's role settings did not take", sc, jit)
	}
	return nil
}

// connected is what idem serve said at start about its route to
// PostgreSQL: the sentence, and the statement mode in force.
func (p *idemProc) connected() (route, mode string, err error) {
	b, _ := os.ReadFile(p.logPath)
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.Contains(line, []byte("postgres: connected to ")) {
			continue
		}
		var l struct {
			Message       string `json:"message"`
			StatementMode string `json:"statement_mode"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return "", "", fmt.Errorf("idem serve's route line: %w: %s", err, line)
		}
		return strings.TrimPrefix(l.Message, "postgres: connected to "), l.StatementMode, nil
	}
	return "", "", fmt.Errorf("idem serve did not say how it connected to PostgreSQL:\n%s", p.tail())
}

// withQueryExecMode adds pgx's default_query_exec_mode to url.
func withQueryExecMode(url, mode string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "default_query_exec_mode=" + mode
}

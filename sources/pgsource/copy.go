package pgsource

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Target is where Copy writes: a table of the load's transaction, often a
// temporary one the strategy then reads as its source.
type Target struct {
	// Table is the table's name, quoted here with Sanitize, e.g.
	// pgx.Identifier{"staging", "orders"} or pgx.Identifier{"pg_temp", "src"}.
	Table pgx.Identifier
	// Columns are the table's columns the SQL's columns go into, in the
	// SQL's order, unquoted (quoted here). Empty means all of the table's
	// columns, in the table's order.
	Columns []string
	// Where, when set, is a condition COPY checks on each row (COPY …
	// WHERE), written by the caller as SQL: its names quoted, its values
	// literals.
	Where string
}

// Result is what one Copy did.
type Result struct {
	// Rows is how many rows the destination took (its COPY's command tag).
	Rows int64
	// Attempts is how many times the source query ran: 1, plus one per
	// recovery conflict retried.
	Attempts int
	// Source is the server and the snapshot the rows came from.
	Source Source
}

// copyChunk is how many bytes of COPY text the source side gathers before
// handing them to the destination: the bound on the copy's memory, and large
// enough that the destination gets few, large CopyData messages.
const copyChunk = 64 << 10

// Errors that close one side of the pipe when the other side stops. Their
// text reaches the destination server (as the CopyFail message, in its log),
// so it says nothing of the source but that it stopped.
var (
	errSourceStopped      = errors.New("pgsource: the source stopped sending rows")
	errDestinationStopped = errors.New("pgsource: the destination stopped taking rows")
)

// Copy reads the partition p from the source spec names and writes its rows
// into to, inside dst, the load's transaction, which stays the caller's to
// commit or roll back.
//
// On the source it opens a dedicated connection and one REPEATABLE READ,
// READ ONLY transaction, checks a standby's lag (Spec.MaxReplicaLag), and
// runs COPY (spec.SQL with p bound) TO STDOUT. The text streams through a
// pipe into COPY to FROM STDIN on dst's connection, a bounded buffer at a
// time, never the whole partition in memory. Both sides run with the same
// pinned text settings (DateStyle, IntervalStyle, extra_float_digits,
// TimeZone, bytea_output, lc_monetary, xmloption); dst's own values are back
// in place when Copy returns.
//
// The COPY into dst runs inside a savepoint. If the source fails mid-stream
// the savepoint is rolled back, so dst holds none of the attempt's rows and
// stays usable. A recovery conflict on a standby is retried that way, from a
// new snapshot, up to Spec.RecoveryConflictRetries times.
//
// Errors, read by behaviour (errors.As):
//   - *LagError (NotReady): the standby lags; wait, nothing was read.
//   - *RecoveryConflictError (Fatal): the retries are spent; the message
//     says which standby settings fix it.
//   - *Error: the source failed; Kind says fatal (the query, grants or URL:
//     Fatal, FatalReason), unavailable (SourceUnavailable) or transient.
//   - *SpecError, *PartitionError (Fatal): the Spec or the event's value.
//   - a context error, wrapped, when ctx ends.
//   - anything else is the destination's (the warehouse's) own error,
//     returned as pgx gave it, for the caller to classify as it classifies
//     the load's other statements. Copy rolled back to its savepoint, so dst
//     stays usable unless its connection broke.
//
// No error holds the URL or its password.
func Copy(ctx context.Context, spec Spec, p Params, dst pgx.Tx, to Target) (Result, error) {
	if err := spec.Validate(); err != nil {
		return Result{}, err
	}
	if len(to.Table) == 0 {
		return Result{}, &SpecError{Field: "target", Problem: "names no table", reason: ReasonSourceConfig}
	}
	bound, err := bind(spec.SQL, p)
	if err != nil {
		return Result{}, err
	}
	copyTo := "COPY (" + bound + "\n) TO STDOUT"
	copyFrom := "COPY " + to.Table.Sanitize()
	if len(to.Columns) > 0 {
		cols := make([]string, len(to.Columns))
		for i, c := range to.Columns {
			cols[i] = pgx.Identifier{c}.Sanitize()
		}
		copyFrom += " (" + strings.Join(cols, ", ") + ")"
	}
	copyFrom += " FROM STDIN"
	if to.Where != "" {
		copyFrom += " WHERE " + to.Where
	}

	var res Result
	res.Attempts, err = withSource(ctx, spec, func(s *session, src Source) error {
		n, err := copyInSavepoint(ctx, s, dst, copyTo, copyFrom)
		if err != nil {
			return err
		}
		res.Rows, res.Source = n, src
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// copyInSavepoint runs one attempt's copy inside a savepoint of dst,
// rolled back when it fails. Errors of dst come back as *dstError, the
// source's as they came.
func copyInSavepoint(ctx context.Context, s *session, dst pgx.Tx, copyTo, copyFrom string) (int64, error) {
	sp, err := dst.Begin(ctx)
	if err != nil {
		return 0, &dstError{err}
	}
	n, err := pinnedCopy(ctx, s, sp, copyTo, copyFrom)
	if err != nil {
		var d *dstError
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rbErr := sp.Rollback(rbCtx); rbErr != nil && !errors.As(err, &d) && ctx.Err() == nil {
			// The source failed and dst cannot even go back to the
			// savepoint: dst is the problem now.
			return 0, &dstError{fmt.Errorf("pgsource: rolling back to the savepoint after a failed copy: %w", rbErr)}
		}
		return 0, err
	}
	if err := sp.Commit(ctx); err != nil {
		return 0, &dstError{err}
	}
	return n, nil
}

// pinnedCopy pins the text settings on the destination for the copy, then
// puts the caller's values back.
func pinnedCopy(ctx context.Context, s *session, sp pgx.Tx, copyTo, copyFrom string) (int64, error) {
	names := make([]string, len(pinned))
	values := make([]string, len(pinned))
	for i, p := range pinned {
		names[i], values[i] = p.name, p.value
	}
	old := make([]string, len(pinned))
	if err := sp.QueryRow(ctx, `SELECT array_agg(current_setting(n) ORDER BY o) FROM unnest($1::text[]) WITH ORDINALITY AS u(n, o)`,
		names).Scan(&old); err != nil {
		return 0, &dstError{err}
	}
	if _, err := sp.Exec(ctx, setSQL, names, values); err != nil {
		return 0, &dstError{err}
	}
	n, err := pipe(ctx, s.conn.PgConn(), copyTo, sp.Conn().PgConn(), copyFrom)
	if err != nil {
		return 0, err
	}
	if _, err := sp.Exec(ctx, setSQL, names, old); err != nil {
		return 0, &dstError{err}
	}
	return n, nil
}

// setSQL sets settings for the rest of the transaction (set_config with
// is_local), in the order given.
const setSQL = `SELECT count(set_config(n, v, true)) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(n, v, o)`

// pipe streams COPY TO on src into COPY FROM on dst and returns the rows dst
// took. The source side writes into a buffer of copyChunk bytes in front of
// an io.Pipe, so memory stays bounded and the destination reads whole
// chunks. When one side stops, the other's end of the pipe is closed, so
// neither waits forever; the goroutine has ended when pipe returns.
func pipe(ctx context.Context, src *pgconn.PgConn, copyTo string, dst *pgconn.PgConn, copyFrom string) (int64, error) {
	pr, pw := io.Pipe()
	type result struct {
		tag pgconn.CommandTag
		err error
	}
	done := make(chan result, 1)
	go func() {
		bw := bufio.NewWriterSize(pw, copyChunk)
		tag, err := src.CopyTo(ctx, bw, copyTo)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			pw.CloseWithError(errSourceStopped)
		} else {
			pw.Close()
		}
		done <- result{tag, err}
	}()
	dstTag, dstErr := dst.CopyFrom(ctx, pr, copyFrom)
	pr.CloseWithError(errDestinationStopped)
	sent := <-done

	switch {
	case sent.err != nil && !errors.Is(sent.err, errDestinationStopped):
		// The source failed first; the destination's error (COPY from
		// stdin failed) is only its echo.
		return 0, sent.err
	case dstErr != nil:
		return 0, &dstError{dstErr}
	case sent.err != nil:
		return 0, &dstError{errors.New("pgsource: the destination ended the copy early")}
	case sent.tag.RowsAffected() != dstTag.RowsAffected():
		return 0, &dstError{fmt.Errorf("pgsource: the source sent %d rows and the destination took %d", sent.tag.RowsAffected(), dstTag.RowsAffected())}
	}
	return dstTag.RowsAffected(), nil
}

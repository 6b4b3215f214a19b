package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A lease lets one process at a time run a pass of many transactions: a row
// of idem.leases (schema v15) with an expiry, taken, renewed and given back
// by single autocommit statements. No session state survives any of them,
// so a lease holds behind a transaction pooler, where a session advisory
// lock would stay on whichever server connection took it.
//
// Mutual exclusion holds while the holder renews in time: a holder that
// dies, or cannot reach the database, loses its lease when it expires, and
// Hold then stops its work. What a lease guards must stay correct if two
// holders ever overlap (a lease commit lost in a crash of the server, a
// promoted standby that lacks the last renewal): it only keeps passes from
// repeating each other's work.

// ErrLeaseLost: the lease expired or was taken over before its holder
// renewed it or gave it back.
var ErrLeaseLost = errors.New("lost (expired or taken over)")

// Lease is one acquisition of a named lease.
type Lease struct {
	db     Querier
	name   string
	holder string
	ttl    time.Duration
	// renewed is when, by this process's clock, the statement that last
	// set expires_at was sent: the lease is held until at least renewed+ttl.
	renewed time.Time
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.name }

// tryLeaseSQL takes lease $1 for holder $2 until $3 microseconds from now,
// unless another holder's lease has not expired: then it returns no row.
// A concurrent taker waits for the row lock and sees the new expiry, so one
// of them wins.
const tryLeaseSQL = `
INSERT INTO idem.leases AS l (name, holder, expires_at)
VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, acquired_at = EXCLUDED.acquired_at
 WHERE l.expires_at <= clock_timestamp()
RETURNING holder`

// TryLease takes the lease name for ttl if no one holds it, in one
// statement; ok is false when another holder does. db must not be a
// transaction (no other process would see the lease before it commits);
// with Hold, it must be safe for concurrent use (a pool).
func TryLease(ctx context.Context, db Querier, name string, ttl time.Duration) (l *Lease, ok bool, err error) {
	if ttl <= 0 {
		return nil, false, fmt.Errorf("audit: lease %q: the ttl must be positive", name)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, false, fmt.Errorf("audit: lease %q: %w", name, err)
	}
	l = &Lease{db: db, name: name, holder: hex.EncodeToString(b[:]), ttl: ttl, renewed: time.Now()}
	var holder string
	err = db.QueryRow(ctx, tryLeaseSQL, name, l.holder, ttl.Microseconds()).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("audit: lease %q: %w", name, err)
	}
	return l, true, nil
}

// Renew extends the lease by its ttl from now. It fails with ErrLeaseLost
// when the lease expired (even if no one took it since: its holder cannot
// know that) or was given back.
func (l *Lease) Renew(ctx context.Context) error {
	sent := time.Now()
	tag, err := l.db.Exec(ctx, `
		UPDATE idem.leases SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		 WHERE name = $1 AND holder = $2 AND expires_at > clock_timestamp()`, l.name, l.holder, l.ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("audit: renew lease %q: %w", l.name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("audit: lease %q: %w", l.name, ErrLeaseLost)
	}
	l.renewed = sent
	return nil
}

// releaseTimeout bounds giving a lease back, which runs even when the
// caller's context is done (at shutdown): a lease not given back only
// makes the next holder wait for its expiry.
const releaseTimeout = 5 * time.Second

// Release gives the lease back, so the next taker need not wait for it to
// expire. It ends the lease rather than deleting its row (idem_loader has
// no DELETE on schema idem), and does nothing to a lease another holder has
// taken since.
func (l *Lease) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := l.db.Exec(ctx, `
		UPDATE idem.leases SET expires_at = clock_timestamp()
		 WHERE name = $1 AND holder = $2 AND expires_at > clock_timestamp()`, l.name, l.holder); err != nil {
		return fmt.Errorf("audit: release lease %q: %w", l.name, err)
	}
	return nil
}

// renewRetry is how soon a renewal that failed (not lost: the database did
// not answer) is tried again, while the lease has not expired.
const renewRetry = time.Second

// Hold runs work holding the lease, then gives it back. The lease is
// renewed every third of its ttl, so two renewals can fail before it
// expires. When it is lost (taken over, or not renewed before it expired
// by this process's clock), work's context is cancelled with a cause that
// wraps ErrLeaseLost, and so is Hold's error if work fails. No one else
// may renew the lease meanwhile.
func (l *Lease) Hold(ctx context.Context, work func(context.Context) error) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kctx, stop := context.WithCancel(wctx)
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		l.keep(kctx, cancel)
	}()
	err := work(wctx)
	stop()
	<-renewing
	if rerr := l.Release(ctx); rerr != nil && err == nil {
		err = rerr
	}
	if cause := context.Cause(wctx); err != nil && errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// keep renews the lease until ctx is done, calling lost with the cause
// when the lease is lost.
func (l *Lease) keep(ctx context.Context, lost context.CancelCauseFunc) {
	every := l.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		left := time.Until(l.renewed.Add(l.ttl))
		rctx, cancel := context.WithTimeout(ctx, min(every, left))
		err := l.Renew(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return // the work ended during the renewal
		case err == nil:
			t.Reset(every)
		case errors.Is(err, ErrLeaseLost):
			lost(err)
			return
		default:
			left = time.Until(l.renewed.Add(l.ttl))
			if left <= 0 {
				lost(fmt.Errorf("audit: lease %q not renewed within %s: %w (%v)", l.name, l.ttl, ErrLeaseLost, err))
				return
			}
			t.Reset(min(renewRetry, left))
		}
	}
}

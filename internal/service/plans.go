package service

import (
	"context"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// A prepared statement keeps the plan the server made for it after its
// fifth execution for as long as the connection lives, or until the
// table's statistics change. On a new installation that plan is made
// while idem's tables hold a few rows, where reading a whole table costs
// less than an index probe, and autovacuum analyzes a growing table only
// once a minute at most: a first backfill ran its bookkeeping on plans
// made for tables a thousandth of their size. The statements' shapes keep
// most plans on their indexes at any size (bench/NOTES.md); planAges
// covers the rest.
//
// It reads the size of idem's tables every planCheckEvery and, whenever
// one has doubled (or halved) since the last reading, starts a new age.
// A connection prepared in an older age forgets its statements before it
// is next used, so they are planned again for the tables as they are now.
// A table grows through a handful of ages in its life (a 10M-row audit has
// been through twenty), so re-preparing costs a few round trips per
// connection in all. It needs no privilege: pg_relation_size is open to
// every role.
type planAges struct {
	age  atomic.Int64
	last []int
	log  zerolog.Logger
}

const (
	planCheckEvery = 2 * time.Second
	planAgeKey     = "idem.plan_age"
)

// tableSizesSQL reads the size of each of idem's tables in pages, in a
// fixed order.
const tableSizesSQL = `
	SELECT coalesce(array_agg(pg_relation_size(c.oid) / current_setting('block_size')::bigint ORDER BY c.relname), '{}')
	  FROM pg_class c
	 WHERE c.relnamespace = 'idem'::regnamespace AND c.relkind = 'r'`

// orders are the doubling orders of sizes in pages: 0 for an empty table,
// then 1 + floor(log2(pages)).
func orders(pages []int64) []int {
	out := make([]int, len(pages))
	for i, p := range pages {
		out[i] = bits.Len64(uint64(max(p, 0)))
	}
	return out
}

// observe records a reading of the tables' sizes and reports whether a
// new age began.
func (p *planAges) observe(pages []int64) bool {
	o := orders(pages)
	if p.last == nil || slices.Equal(o, p.last) {
		p.last = o
		return false
	}
	p.last = o
	p.age.Add(1)
	return true
}

// watch reads the tables' sizes on pool until ctx ends.
func (p *planAges) watch(ctx context.Context, pool *pgxpool.Pool) {
	t := time.NewTicker(planCheckEvery)
	defer t.Stop()
	for {
		p.check(ctx, pool)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check reads the tables' sizes once; a reading that fails is skipped.
func (p *planAges) check(ctx context.Context, pool *pgxpool.Pool) {
	var pages []int64
	if err := pool.QueryRow(ctx, tableSizesSQL).Scan(&pages); err == nil && p.observe(pages) {
		p.log.Debug().Int64("age", p.age.Load()).Msg("idem's tables grew: statements are prepared again")
	}
}

// connected marks a new connection as prepared in the current age.
func (p *planAges) connected(c *pgx.Conn) {
	c.PgConn().CustomData()[planAgeKey] = p.age.Load()
}

// prepare is the pool's PrepareConn: a connection prepared in an older age
// forgets its prepared statements (one DEALLOCATE ALL) before it is used.
// A connection that cannot is destroyed, and the caller gets another.
func (p *planAges) prepare(ctx context.Context, c *pgx.Conn) (bool, error) {
	age := p.age.Load()
	data := c.PgConn().CustomData()
	if had, ok := data[planAgeKey].(int64); ok && had == age {
		return true, nil
	}
	if err := c.DeallocateAll(ctx); err != nil {
		return false, nil
	}
	data[planAgeKey] = age
	return true, nil
}

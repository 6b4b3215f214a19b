package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewDBIsolatedAndChecksum(t *testing.T) {
	a, b := pgtest.NewDB(t), pgtest.NewDB(t)
	if a.Name == b.Name {
		t.Fatal("two tests share a database")
	}
	a.Exec(t, "CREATE TABLE x (id int, d date); INSERT INTO x VALUES (1, '2026-11-28'), (2, '2026-11-29')")
	before := a.Checksum(t, "x")
	a.Exec(t, "UPDATE x SET id = id WHERE id = 1")
	if got := a.Checksum(t, "x"); got != before {
		t.Fatalf("checksum changed on a no-op update: %s != %s", got, before)
	}
	a.Exec(t, "UPDATE x SET d = '2026-11-30' WHERE id = 1")
	if got := a.Checksum(t, "x"); got == before {
		t.Fatal("checksum did not change when a row did")
	}
	if n := b.Int(t, "SELECT count(*) FROM pg_tables WHERE tablename = 'x'"); n != 0 {
		t.Fatalf("database b sees a's table")
	}
	// A Go string binds to a date parameter: sources compare date columns to @partition.
	var n int64
	if err := a.Pool.QueryRow(context.Background(), "SELECT count(*) FROM x WHERE d = $1", "2026-11-29").Scan(&n); err != nil || n != 1 {
		t.Fatalf("string to date param: n=%d err=%v", n, err)
	}
}

// A cluster that stopped, followed by another at the same address, has
// none of the first one's templates: NewDBAtFrom makes its template again
// instead of failing on one that is not there.
func TestNewDBAtFromRemakesTheTemplateOfANewClusterAtTheSameAddress(t *testing.T) {
	ctx := context.Background()
	setups := 0
	setup := func(ctx context.Context, pool *pgxpool.Pool) error {
		setups++
		_, err := pool.Exec(ctx, "CREATE TABLE made_by_setup (id int)")
		return err
	}
	first, err := localpg.Start(ctx, localpg.Options{Copy: true})
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDBAtFrom(t, first.URL(""), "same-address", setup)
	db.Pool.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := localpg.Start(ctx, localpg.Options{Copy: true, Port: first.Port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	if first.URL("") != second.URL("") {
		t.Fatalf("the second cluster is not at the first's address: %s != %s", second.URL(""), first.URL(""))
	}
	db = pgtest.NewDBAtFrom(t, second.URL(""), "same-address", setup)
	if n := db.Int(t, "SELECT count(*) FROM pg_tables WHERE tablename = 'made_by_setup'"); n != 1 {
		t.Fatalf("the database is not a copy of the template: %d tables made by setup", n)
	}
	if setups != 2 {
		t.Fatalf("setup ran %d times, want 2 (once per cluster)", setups)
	}
}

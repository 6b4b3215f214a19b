package pgtest_test

import (
	"context"
	"testing"

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

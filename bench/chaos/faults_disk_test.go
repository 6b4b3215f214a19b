package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
)

// diskFullShortSeed is TestChaosDiskFullShort's seed: its schedule holds
// full disks of both sorts early in the phase (TestDiskFullShortSchedule).
const diskFullShortSeed = 20261207

var diskFullShortOptions = Options{Seed: diskFullShortSeed, Kinds: []string{FaultPGDiskFull}, LongRounds: -1,
	Duration: 45 * time.Second, Events: 300}

// TestDiskFullShortSchedule: the seed of TestChaosDiskFullShort draws
// full disks only, at least two in the first half of the phase, among
// them one that forces a WAL PANIC and one that does not.
func TestDiskFullShortSchedule(t *testing.T) {
	o := diskFullShortOptions.WithDefaults()
	early, modes := 0, map[int]bool{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		require.Equal(t, FaultPGDiskFull, f.Kind)
		if f.At < o.Duration/2 {
			early++
			modes[f.Param] = true
		}
		require.GreaterOrEqual(t, f.Hold, 3*time.Second)
		require.LessOrEqual(t, f.Hold, 8*time.Second)
	}
	require.GreaterOrEqual(t, early, 2)
	require.True(t, modes[0] && modes[1], "both sorts of full disk early in the phase")
}

// sizedTmpfs mounts a tmpfs of sizeMB MiB on a new directory and returns
// it; the cleanup unmounts it and removes the directory. It skips the test
// where mount is refused (not root, no CAP_SYS_ADMIN).
func sizedTmpfs(t *testing.T, sizeMB int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem-pgdisk-")
	require.NoError(t, err)
	// The server's user must reach the mount below it.
	require.NoError(t, os.Chmod(dir, 0o755))
	mnt := filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0755", sizeMB), "tmpfs", mnt).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		t.Skipf("pg_disk_full needs a sized tmpfs, and mount failed: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// The server's processes may still be exiting when its stop
		// returns, on a loaded machine: the mount stays busy a moment.
		var out []byte
		var err error
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
				_ = os.RemoveAll(dir)
				return
			}
			if time.Now().After(deadline) {
				break
			}
		}
		t.Errorf("umount %s: %v: %s; processes using it: %v", mnt, err, out, usersOf(mnt))
	})
	return mnt
}

// usersOf lists the processes whose working directory or an open file is
// below dir, as "pid command".
func usersOf(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		links, _ := filepath.Glob(p + "/fd/*")
		for _, l := range append([]string{p + "/cwd"}, links...) {
			if target, err := os.Readlink(l); err == nil && (strings.HasPrefix(target, dir+"/") || target == dir) {
				comm, _ := os.ReadFile(p + "/comm")
				out = append(out, filepath.Base(p)+" "+strings.TrimSpace(string(comm)))
				break
			}
		}
	}
	return out
}

// pgOnTmpfs starts a cluster whose data directory is on a tmpfs of sizeMB
// MiB, as pg does otherwise (synchronous_commit on), its WAL kept well
// under the filesystem's size; it is stopped before the tmpfs goes.
func pgOnTmpfs(t *testing.T, sizeMB int) *localpg.Server {
	t.Helper()
	mnt := sizedTmpfs(t, sizeMB)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := localpg.Start(ctx, localpg.Options{Dir: mnt, Settings: []string{
		"synchronous_commit = on", "max_wal_size = '96MB'", "min_wal_size = '32MB'"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Close() })
	return cluster
}

// TestBallastFillsTheDataDirectory is pg_disk_full's mechanism: with the
// ballast in place a load's writes fail with disk full (53100) or the
// server PANICs; once it is gone, the same writes succeed, and the server
// runs (started again if it had given up). A data directory on an
// ordinary filesystem is refused.
func TestBallastFillsTheDataDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL on a tmpfs")
	}
	require.Error(t, sizeLimited(filepath.Join(os.TempDir(), "x", "data")), "an ordinary directory is no size-limited filesystem")
	pg := pgOnTmpfs(t, 96)
	require.NoError(t, sizeLimited(pg.DataDir))
	ctx := context.Background()
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, pg.URL(""))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	c := conn()
	_, err := c.Exec(ctx, "CREATE TABLE t (x text); CREATE TABLE w (n int); INSERT INTO w VALUES (1)")
	require.NoError(t, err)
	ballast := filepath.Join(filepath.Dir(pg.DataDir), ballastName)
	written, err := fillBallast(ballast)
	require.NoError(t, err)
	require.Greater(t, written, int64(1<<20))
	var pgErr *pgconn.PgError
	for i := 0; ; i++ {
		_, err = c.Exec(ctx, "INSERT INTO t SELECT repeat('x', 1000) FROM generate_series(1, 10000)")
		if err != nil {
			break
		}
		require.Less(t, i, 50, "writes go on with the disk full")
	}
	t.Logf("with the ballast (%d MiB): %v", written>>20, err)
	full := errors.As(err, &pgErr) && pgErr.Code == "53100"
	require.True(t, full || countPanics(pg.LogFile) > 0, "neither disk full nor a PANIC: %v", err)

	// WAL alone (an update in place, a switch to the next segment): once
	// no segment is left to recycle, the next one cannot be made and the
	// server PANICs.
	for i := 0; ; i++ {
		if _, err = c.Exec(ctx, "UPDATE w SET n = n + 1"); err == nil {
			_, err = c.Exec(ctx, "SELECT pg_switch_wal()")
		}
		if err != nil {
			break
		}
		require.Less(t, i, 200, "WAL goes on with the disk full")
	}
	t.Logf("WAL with the ballast: %v; PANICs in the log: %d; postmaster running: %v", err, countPanics(pg.LogFile), pg.Running())
	require.Positive(t, countPanics(pg.LogFile), "no PANIC on a WAL write with the disk full")
	// The crash restart's recovery cannot write its checkpoint either:
	// the postmaster gives up, and only a start brings it back.
	for i := 0; i < 100 && pg.Running(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(pg.LogFile)
	t.Logf("postmaster running 10 s after the PANIC: %v; log:\n%s", pg.Running(), lastLines(string(log), 12))

	require.NoError(t, os.Remove(ballast))
	restarted, err := upOrRestarted(ctx, pg)
	require.NoError(t, err)
	require.True(t, accepting(ctx, pg), "up again once there is room (started again: %v)", restarted)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c2, err := pgx.Connect(ctx, pg.URL(""))
		if err == nil {
			_, err = c2.Exec(ctx, "INSERT INTO t SELECT repeat('x', 1000) FROM generate_series(1, 10000)")
			_ = c2.Close(ctx)
		}
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "writes still fail 30 s after the ballast went: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// TestChaosDiskFullShort is a focused campaign of full disks: the
// warehouse's data directory on a 640 MiB tmpfs, filled with a ballast for
// 3-8 s at a time. Loads fail with disk full (53100, an unusable warehouse
// to idem, which holds its messages); in half the faults WAL segment
// switches also make PostgreSQL PANIC, its crash restart fail on the full
// disk, and the nemesis start it once the ballast is gone, as a service
// manager would. idem must load again with no command, and nothing may be
// lost, loaded twice or dead-lettered.
func TestChaosDiskFullShort(t *testing.T) {
	focused(t)
	o := diskFullShortOptions
	o.PG = pgOnTmpfs(t, 640)
	r := runCampaign(t, o)
	requireFaults(t, r, FaultPGDiskFull)
	if r != nil && r.Faults.ByKind[FaultPGDiskFull] < 2 {
		t.Errorf("%d full disks: the campaign needs two at least", r.Faults.ByKind[FaultPGDiskFull])
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/localpg"
)

// FaultPGDiskFull fills the filesystem of PostgreSQL's data directory with
// a ballast file until a write fails with ENOSPC, holds it full for a few
// seconds, then removes the ballast. Loads fail with disk full (SQLSTATE
// 53100, which idem takes for an unusable warehouse and holds its messages
// through), or PostgreSQL PANICs on a WAL write and restarts. Drawn only
// when Options.Kinds names it, and only for a data directory on a
// filesystem of its own no larger than diskFullMaxFS (a sized tmpfs or a
// loop-mounted image): the ballast must never fill a disk the machine
// needs.
const FaultPGDiskFull = "pg_disk_full"

// diskFullMaxFS is the largest filesystem pg_disk_full fills: the full
// campaign's warehouse holds about 3.5 GB by its end (the source's append
// target and its dedupe index), on a tmpfs of 6000 MiB.
const diskFullMaxFS = 8 << 30

// ballastName is the ballast file, at the root of the data directory's
// filesystem (the data directory's parent).
const ballastName = "chaos-ballast"

// drawDiskFull sets how long the disk stays full, 3 to 8 s, and for half
// the faults (Param 1) that the nemesis also makes PostgreSQL switch WAL
// segments until it needs a new one it cannot write: a PANIC, and a crash
// restart of the server on the full disk.
func drawDiskFull(f *fault, rng *rand.Rand) {
	f.Hold = time.Duration(3000+rng.IntN(5001)) * time.Millisecond
	f.Param = rng.IntN(2)
}

// sizeLimited says why the filesystem of dataDir's parent may not be filled:
// it must be a filesystem of its own (a mount point), no larger than
// diskFullMaxFS.
func sizeLimited(dataDir string) error {
	root := filepath.Dir(dataDir)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(root, &fs); err != nil {
		return err
	}
	if size := fs.Blocks * uint64(fs.Bsize); size > diskFullMaxFS {
		return fmt.Errorf("%s is on a filesystem of %d MiB; use one of at most %d MiB of its own (a sized tmpfs)",
			root, size>>20, diskFullMaxFS>>20)
	}
	var st, parent syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		return err
	}
	if err := syscall.Stat(filepath.Dir(root), &parent); err != nil {
		return err
	}
	if st.Dev == parent.Dev {
		return fmt.Errorf("%s is not a mount point: the ballast would fill the filesystem it shares", root)
	}
	return nil
}

// diskFull fills the data directory's filesystem, with f.Param 1 forces
// WAL segment switches until one fails, holds the disk full for f.Hold,
// removes the ballast, and waits until idem has finished a load again or
// has nothing left to load (f.Resumed). f.Outage is how long the disk was full; f.Server gives the
// ballast's size and what PostgreSQL did: how many PANICs its log gained,
// and whether it had stopped and the nemesis (as a service manager would)
// started it again.
func (n *nemesis) diskFull(ctx, heal context.Context, f *fault) error {
	pg := n.wh.primary()
	if err := sizeLimited(pg.DataDir); err != nil {
		f.Skipped = err.Error()
		return nil
	}
	panicsBefore := countPanics(pg.LogFile)
	path := filepath.Join(filepath.Dir(pg.DataDir), ballastName)
	written, err := fillBallast(path)
	defer func() { _ = os.Remove(path) }()
	if err != nil {
		return err
	}
	full := time.Now()
	switches := 0
	if f.Param == 1 {
		switches = n.switchWAL(heal, full.Add(f.Hold))
	}
	sleepCtx(ctx, time.Until(full.Add(f.Hold)))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the ballast: %w", err)
	}
	f.Outage = time.Since(full)
	up := time.Now()
	restarted, err := upOrRestarted(heal, pg)
	if err != nil {
		return err
	}
	f.Server = fmt.Sprintf("ballast=%dMiB wal_switches=%d panics=%d restarted=%v", written>>20, switches,
		countPanics(pg.LogFile)-panicsBefore, restarted)
	f.Resumed = n.waitBusyResumed(ctx, up)
	return nil
}

// switchWAL writes a transaction and switches to the next WAL segment, over
// and over, until a statement fails (the server PANICked: it could not
// make the next segment) or until; it returns how many switches it made.
func (n *nemesis) switchWAL(ctx context.Context, until time.Time) int {
	k := 0
	for time.Now().Before(until) && k < 200 {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := n.db.Exec(qctx, "SELECT txid_current()")
		if err == nil {
			_, err = n.db.Exec(qctx, "SELECT pg_switch_wal()")
		}
		cancel()
		if err != nil {
			break
		}
		k++
	}
	return k
}

// fillBallast writes zeros to path until the filesystem is full, and
// returns how many bytes it wrote. ENOSPC is the expected end; any other
// error is returned.
func fillBallast(path string) (int64, error) {
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("ballast: %w", err)
	}
	defer fh.Close()
	var total int64
	for _, size := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, size)
		for {
			k, err := fh.Write(buf)
			total += int64(k)
			if err == nil {
				continue
			}
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return total, fmt.Errorf("ballast: %w", err)
		}
	}
	return total, nil
}

// countPanics counts the PANIC lines of PostgreSQL's log.
func countPanics(logFile string) int {
	b, err := os.ReadFile(logFile)
	if err != nil {
		return 0
	}
	n := 0
	for line := range bytes.Lines(b) {
		if strings.Contains(string(line), "PANIC:") {
			n++
		}
	}
	return n
}

// upOrRestarted waits, once the disk has room again, until PostgreSQL
// accepts connections or its postmaster has exited, and starts an exited
// one again, as systemd's Restart=on-failure would; it reports whether it
// did. A server that PANICked on the full disk recovers: when its startup
// process cannot write the end of recovery (the disk was still full when
// its redo ended, or filled again), the postmaster gives up, perhaps
// seconds after the ballast went. A look at the moment the ballast went
// saw it recovering, and the full campaign's next fault found it stopped.
func upOrRestarted(ctx context.Context, pg *localpg.Server) (bool, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if !pg.Running() {
			return true, startAfterCrash(ctx, pg)
		}
		if accepting(ctx, pg) {
			return false, nil
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return false, errors.New("PostgreSQL neither accepts connections nor has stopped 3 min after the disk had room")
}

// accepting reports whether pg accepts a connection now.
func accepting(ctx context.Context, pg *localpg.Server) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, pg.URL(""))
	if err != nil {
		return false
	}
	_ = c.Close(ctx)
	return true
}

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A files dataset before and after its marker: `idem load --dry-run` says
// it is not ready (exit 3), then reads the files into a rolled-back load
// and lists them; `idem validate` inspects the partition's files, and a
// file whose header does not fit the target is a problem.
func TestFilesDryRunAndValidate(t *testing.T) {
	w := newCLIWorld(t)
	landing := t.TempDir()
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	cfg = fmt.Appendf(cfg, `  landed:
    strategy: delete_insert
    target: analytics.landed
    partition_column: event_date
    source:
      files:
        url: file://%s/dt={partition}/
        format: csv
        ready: {marker: _SUCCESS}
`, landing)
	require.NoError(t, os.WriteFile(w.cfg, cfg, 0o600))
	w.db.Exec(t, "CREATE TABLE analytics.landed (id bigint, event_date date NOT NULL, amount numeric(12,2), note text)")
	part := filepath.Join(landing, "dt=2026-11-28")
	require.NoError(t, os.MkdirAll(part, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(part, "part-0001.csv"), []byte("id,amount,note\n1,1.50,a\n2,2.50,b\n"), 0o644))

	r := w.run("load", "landed", "2026-11-28", "--dry-run")
	require.Equal(t, 3, ExitCode(r.e), "%s%s", r.out, r.err)
	require.Regexp(t, `^landed 2026-11-28 is not ready to load: not_ready: file://\S+/dt=2026-11-28/: marker _SUCCESS not found; idem serve would wait`, r.e.Error())
	r = w.run("validate", "--partition", "2026-11-28")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, `dataset "landed": files of 2026-11-28: not complete: not_ready: `)

	require.NoError(t, os.WriteFile(filepath.Join(part, "_SUCCESS"), nil, 0o644))
	r = w.run("load", "landed", "2026-11-28", "--dry-run")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "would read 1 file(s), listing ")
	require.Contains(t, r.out, "/dt=2026-11-28/part-0001.csv  33 bytes  sha256 ")
	require.Contains(t, r.out, "  2 rows\n")
	require.Contains(t, r.out, "dry run of landed 2026-11-28 (rolled back): 0 deleted, 2 inserted")
	require.Zero(t, w.db.Int(t, "SELECT count(*) FROM analytics.landed"), "rolled back")
	require.Zero(t, w.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
	r = w.run("validate", "--partition", "2026-11-28")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, `dataset "landed": files of 2026-11-28: 1 file(s), 33 bytes, complete`)

	// A second file whose header names a column the target lacks.
	require.NoError(t, os.WriteFile(filepath.Join(part, "part-0002.csv"), []byte("id,amount,colour\n3,1.00,red\n"), 0o644))
	r = w.run("validate", "--partition", "2026-11-28")
	require.Equal(t, 1, ExitCode(r.e), "%s%s", r.out, r.err)
	require.Contains(t, r.err, `dataset "landed": files of 2026-11-28: `)
	require.Contains(t, r.err, "colour")
	// Without --partition and nothing attempted, it says why it looked at none.
	r = w.run("validate")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, `dataset "landed": files not inspected: no partition attempted yet (pass --partition P)`)
}

package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// loaderRole is the role the replicas log in as with
// Options.LeastPrivilege, and its password.
const (
	loaderRole     = "idem_loader_chaos"
	loaderPassword = "chaos-loader"
)

// grantsSiteMarker starts the part of grants.sql that grants the example
// sites' sources and targets, which the campaign replaces with its own.
const grantsSiteMarker = "-- Sources: read only."

var psqlIf = regexp.MustCompile(`(?s)\\if .*?\\endif\n`)

// grantLoader runs the idem part of grants.sql (everything before its
// examples of sources and targets) for loaderRole on the campaign's
// database, then grants the campaign's own sources and targets as those
// examples grant theirs: SELECT on staging; SELECT, INSERT, UPDATE, DELETE
// on the targets, and CREATE on their schema for append_dedupe's views,
// whose tables (named *_raw) the role owns: idem creates their dedupe
// index. It returns url with the role's credentials.
func grantLoader(ctx context.Context, adminURL, grantsPath, loaderURL string) (string, error) {
	b, err := os.ReadFile(grantsPath)
	if err != nil {
		return "", fmt.Errorf("chaos: grants: %w", err)
	}
	script, _, found := strings.Cut(string(b), grantsSiteMarker)
	if !found {
		return "", fmt.Errorf("chaos: grants: %s has no line %q where the sites' grants start", grantsPath, grantsSiteMarker)
	}
	script = strings.ReplaceAll(psqlIf.ReplaceAllString(script, ""), "idem_loader", loaderRole)
	role := pgx.Identifier{loaderRole}.Sanitize()
	script += fmt.Sprintf(`
ALTER ROLE %[1]s PASSWORD '%[2]s';
GRANT USAGE ON SCHEMA staging TO %[1]s;
GRANT SELECT ON ALL TABLES IN SCHEMA staging TO %[1]s;
GRANT USAGE, CREATE ON SCHEMA analytics TO %[1]s;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA analytics TO %[1]s;
DO $$
DECLARE t text;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'analytics' AND tablename LIKE '%%\_raw' LOOP
        EXECUTE format('ALTER TABLE analytics.%%I OWNER TO %[1]s', t);
    END LOOP;
END $$;
`, role, loaderPassword)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("chaos: grants: %w", err)
	}
	defer conn.Close(ctx)
	// The role belongs to the cluster, which an earlier campaign may have
	// left it in: its grants there went with its database.
	if _, err := conn.Exec(ctx, `DO $$ BEGIN
		IF EXISTS (SELECT FROM pg_roles WHERE rolname = '`+loaderRole+`') THEN
			EXECUTE 'DROP OWNED BY `+role+`';
		END IF; END $$`); err != nil {
		return "", fmt.Errorf("chaos: grants: %w", err)
	}
	if _, err := conn.Exec(ctx, script); err != nil {
		return "", fmt.Errorf("chaos: grants.sql: %w", err)
	}
	u, err := url.Parse(loaderURL)
	if err != nil {
		return "", err
	}
	u.User = url.UserPassword(loaderRole, loaderPassword)
	return u.String(), nil
}

// refusals are the lines of the replicas' logs that say the database
// refused the least-privilege role something. A retention pass stopped by
// an outage or a full disk is not one; one stopped by a refusal says so.
var refusals = regexp.MustCompile(`permission denied|must be owner|SQLSTATE 42501`)

// checkGrants fails r on every refusal in the replicas' logs, and when no
// retention pass ran (none took its lease) in a phase of
// retentionProvenAfter or more.
func (c *campaign) checkGrants(ctx context.Context, r *Report) {
	logs, _ := filepath.Glob(filepath.Join(c.logs, "replica*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); refusals.MatchString(line) {
				r.Check.Refusals++
				if r.Check.Refusals <= 5 {
					r.violate("%s: refused under the least-privilege grants: %s", filepath.Base(path), cut(line, 300))
				}
			}
		}
		f.Close()
	}
	// A replica's first pass comes pruneFirstPass after its start; in a
	// short campaign the faults restart every replica sooner than that.
	if r.FaultPhaseSeconds < retentionProvenAfter.Seconds() {
		return
	}
	var passes int
	if err := c.db.QueryRow(ctx, `SELECT count(*) FROM idem.leases WHERE name = 'prune'`).Scan(&passes); err != nil {
		r.violate("retention: the prune lease not read: %v", err)
	} else if passes == 0 {
		r.violate("no retention pass ran under the least-privilege grants (no prune lease was ever taken)")
	} else {
		r.Check.RetentionRan = true
	}
}

// retentionProvenAfter is the fault phase after which a campaign must have
// run a retention pass: idem serve's first comes a minute after its start
// (internal/service's pruneFirstDelay), and faults restart replicas every
// few tens of seconds.
const retentionProvenAfter = 10 * time.Minute

// asLoader grants the loader role its rights and writes the replicas'
// config again with its credentials.
func (c *campaign) asLoader(ctx context.Context, clientURL, pgURL string) error {
	u, err := grantLoader(ctx, c.wh.url(dbName), c.o.GrantsPath, pgURL)
	if err != nil {
		return err
	}
	return os.WriteFile(c.cfg, []byte(c.config(clientURL, u)), 0o600)
}

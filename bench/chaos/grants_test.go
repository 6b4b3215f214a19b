package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckGrantsSeesRefusals: a refusal in any replica's log is a
// violation; a clean log is none.
func TestCheckGrantsSeesRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("replica0-001.log", `{"level":"info","message":"acked"}`+"\n")
	c := &campaign{logs: dir}
	r := &Report{}
	c.checkGrants(t.Context(), r)
	if len(r.Violations) != 0 || r.Check.Refusals != 0 {
		t.Fatalf("a clean log: %v", r.Violations)
	}
	write("replica1-002.log", `{"level":"warn","error":"ERROR: permission denied for table pipeline_audit (SQLSTATE 42501)","message":"audit retention: pass stopped; the next one carries on"}`+"\n")
	c.checkGrants(t.Context(), r)
	if r.Check.Refusals != 1 || len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "replica1-002.log") {
		t.Fatalf("a refusal: %d refusals, %v", r.Check.Refusals, r.Violations)
	}
}

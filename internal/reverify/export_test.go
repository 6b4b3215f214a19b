package reverify

import (
	"context"

	"github.com/idem-data/idem/audit"
)

// ForgetServer makes the progress of r's last pass, in memory and in the
// warehouse, belong to another server, as a failover after it would.
func ForgetServer(ctx context.Context, r *Reverifier) error {
	r.mu.Lock()
	r.progress.ID = audit.Identity{SystemIdentifier: r.progress.ID.SystemIdentifier + "0"}
	r.mu.Unlock()
	_, err := r.cfg.DB.Exec(ctx, `UPDATE idem.reverify_progress SET system_identifier = system_identifier || '0'`)
	return err
}

// FirstSince and NextOf are firstSince and nextOf.
var (
	FirstSince = firstSince
	NextOf     = nextOf
)

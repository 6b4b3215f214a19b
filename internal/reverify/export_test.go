package reverify

import "github.com/idem-data/idem/audit"

// ForgetServer makes the progress of r's last pass belong to another
// server, as a failover after it would.
func ForgetServer(r *Reverifier) {
	r.mu.Lock()
	r.progress.id = audit.Identity{SystemIdentifier: r.progress.id.SystemIdentifier + "0"}
	r.mu.Unlock()
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/service"
)

// fleetVersion is one config version the fleet runs and the replicas
// running it.
type fleetVersion struct {
	Version  string
	Replicas []string
	Running  map[string]json.RawMessage
}

// groupFleet groups the live members by version, sorted by version. The
// datasets of a version are those of its first replica: one version, one
// set of definitions.
func groupFleet(members []consumer.Member) []fleetVersion {
	byVersion := map[string]*fleetVersion{}
	for _, m := range members {
		v := byVersion[m.Version]
		if v == nil {
			running := make(map[string]json.RawMessage, len(m.Datasets))
			for _, name := range m.Datasets {
				running[name] = m.Definitions[name]
			}
			v = &fleetVersion{Version: m.Version, Running: running}
			byVersion[m.Version] = v
		}
		v.Replicas = append(v.Replicas, m.Replica)
	}
	out := make([]fleetVersion, 0, len(byVersion))
	for _, k := range slices.Sorted(maps.Keys(byVersion)) {
		out = append(out, *byVersion[k])
	}
	return out
}

// validateFleet prints, per config version the live replicas run, what cfg
// changes against it. A difference is information, never a failure.
func (e *env) validateFleet(ctx context.Context, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, js, err := e.openNATS(ctx, cfg, "idem validate")
	if err != nil {
		return err
	}
	defer nc.Close()
	bucket := cfg.NATS.FleetBucketName()
	members, err := consumer.ReadFleet(ctx, js, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		members, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("fleet bucket %s: %w", bucket, err)
	}
	printFleetDiff(e.out, bucket, service.ConfigVersion(cfg), service.Definitions(cfg), groupFleet(members))
	return nil
}

func printFleetDiff(w io.Writer, bucket, newVersion string, next map[string]json.RawMessage, versions []fleetVersion) {
	if len(versions) == 0 {
		fmt.Fprintf(w, "fleet %s: no live replica; nothing to compare with\n", bucket)
		return
	}
	for _, v := range versions {
		fmt.Fprintf(w, "version %s: %d replica(s): %s\n", v.Version, len(v.Replicas), strings.Join(v.Replicas, ", "))
		if v.Version == newVersion {
			fmt.Fprintln(w, "  same as the new config: no change")
			continue
		}
		d := service.DiffDefinitions(v.Running, next)
		if len(d.Added) > 0 {
			fmt.Fprintf(w, "  added: %s\n", strings.Join(d.Added, ", "))
		}
		if len(d.Removed) > 0 {
			fmt.Fprintf(w, "  removed: %s\n", strings.Join(d.Removed, ", "))
		}
		for _, name := range slices.Sorted(maps.Keys(d.Changed)) {
			fmt.Fprintf(w, "  %s: %s changed\n", name, strings.Join(d.Changed[name], ", "))
		}
		if d.Empty() {
			fmt.Fprintln(w, "  no dataset changed")
		}
		for name, def := range v.Running {
			if def == nil && next[name] != nil {
				fmt.Fprintln(w, "  these replicas do not report definitions (older idem): datasets compared by name only")
				break
			}
		}
	}
}

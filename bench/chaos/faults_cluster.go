package chaos

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// injectCluster runs the faults of the cluster topology. Each heals before
// it returns: a server killed or stopped is started again and waited for
// until it reports JetStream current, so that the next fault never takes a
// second server away while the first is still catching up (two of three
// gone is a cluster outage, which nats_down covers on purpose).
func (n *nemesis) injectCluster(ctx, heal context.Context, f *fault) error {
	c := n.cluster
	if c == nil {
		f.Skipped = "one server: no cluster"
		return nil
	}
	switch f.Kind {
	case FaultLeaderKill, FaultFollowerKill:
		// Right after an outage the stream may still be electing: ask again.
		var i int
		var err error
		for try := 0; try < 4; try++ {
			if i, err = n.pickServer(heal, f); err == nil {
				break
			}
			sleepCtx(ctx, time.Second)
		}
		if err != nil {
			f.Skipped = err.Error()
			return nil
		}
		f.Node, f.Server = i, c.nodes[i].name
		c.nodes[i].stop(syscall.SIGKILL, 10*time.Second)
		down := time.Now()
		sleepCtx(ctx, f.Hold)
		err = c.restart(heal, i)
		f.Outage = time.Since(down)
		return err
	case FaultNodeDown:
		f.Server = c.nodes[f.Node].name
		c.nodes[f.Node].stop(syscall.SIGTERM, 15*time.Second)
		down := time.Now()
		sleepCtx(ctx, f.Hold)
		err := c.restart(heal, f.Node)
		f.Outage = time.Since(down)
		return err
	case FaultNATSRolling:
		// An upgrade of the servers: one at a time, each back and current
		// before the next goes.
		var errs []error
		for i, node := range c.nodes {
			node.stop(syscall.SIGTERM, 15*time.Second)
			if err := c.restart(heal, i); err != nil {
				errs = append(errs, err)
				continue
			}
			f.Param++
		}
		return errors.Join(errs...)
	case FaultPartition:
		f.Server = c.nodes[f.Node].name
		healCut, err := c.cutRoutes(f.Node)
		if err != nil {
			return err
		}
		sleepCtx(ctx, f.Hold)
		healCut()
		// Healed once the server is current with the majority again.
		return c.nodes[f.Node].waitHealthy(heal, 90*time.Second)
	case FaultNATSLatency:
		return n.withClientToxic(ctx, f, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Param, f.Param/2), "upstream", "downstream")
	case FaultNATSReset:
		return n.withClientToxic(ctx, f, "reset_peer", fmt.Sprintf(`{"timeout":%d}`, f.Param), "upstream")
	case FaultNATSBlackhole:
		return n.withClientToxic(ctx, f, "timeout", fmt.Sprintf(`{"timeout":%d}`, f.Param), "upstream", "downstream")
	}
	return fmt.Errorf("chaos: unknown fault %q", f.Kind)
}

// pickServer finds the events stream's leader (leader_kill) or one of its
// followers (follower_kill, f.Replica choosing which), as the stream's
// cluster info names them.
func (n *nemesis) pickServer(ctx context.Context, f *fault) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := n.js.Stream(qctx, eventsStream)
	if err != nil {
		return 0, fmt.Errorf("stream info: %v", err)
	}
	info, err := s.Info(qctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %v", err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return 0, errors.New("the stream has no leader")
	}
	name := info.Cluster.Leader
	if f.Kind == FaultFollowerKill {
		if len(info.Cluster.Replicas) == 0 {
			return 0, errors.New("the stream has no followers")
		}
		name = info.Cluster.Replicas[f.Replica%len(info.Cluster.Replicas)].Name
	}
	i := n.cluster.node(name)
	if i < 0 {
		return 0, fmt.Errorf("server %q is not one of the cluster's", name)
	}
	return i, nil
}

func (n *nemesis) withClientToxic(ctx context.Context, f *fault, kind, attrs string, streams ...string) error {
	if f.Node >= 0 {
		f.Server = n.cluster.nodes[f.Node].name
	} else {
		f.Server = "all"
	}
	remove, err := n.cluster.clientToxic(f.Node, kind, attrs, streams...)
	if err != nil {
		return err
	}
	sleepCtx(ctx, f.Hold)
	remove()
	return nil
}

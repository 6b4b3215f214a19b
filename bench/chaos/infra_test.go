package chaos

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer answers each line with itself until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestLinkReplacesAWedgedProxy: a Toxiproxy call that never returns (the
// proxy wedged behind a toxic whose reader is gone) is given up after the
// link's wait; a new proxy takes the link's address, the connections
// through the old one are closed, and new ones reach the upstream again.
func TestLinkReplacesAWedgedProxy(t *testing.T) {
	l, err := startLink(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(l.close)
	l.wait = 200 * time.Millisecond

	old, err := net.Dial("tcp", l.addr)
	require.NoError(t, err)
	defer old.Close()
	got, err := roundTrip(old, "before")
	require.NoError(t, err)
	require.Equal(t, "before\n", got)
	remove, err := l.toxic("latency", `{"latency":1}`, "upstream")
	require.NoError(t, err, "a healthy proxy answers at once")
	remove()

	stuck := make(chan struct{})
	defer close(stuck)
	err = l.bounded(func() error { <-stuck; return nil })
	require.ErrorContains(t, err, "wedged")
	require.Equal(t, 1, l.wedged)

	_, err = roundTrip(old, "after")
	require.Error(t, err, "a connection through the wedged proxy is closed")
	fresh, err := net.Dial("tcp", l.addr)
	require.NoError(t, err)
	defer fresh.Close()
	got, err = roundTrip(fresh, "again")
	require.NoError(t, err, "the same address reaches the upstream through the new proxy")
	require.Equal(t, "again\n", got)
}

// TestFreePortsAreDistinct: the ports of one cluster are drawn while the
// others are held, so none comes out twice.
func TestFreePortsAreDistinct(t *testing.T) {
	for range 20 {
		ports, err := freePorts(9)
		require.NoError(t, err)
		seen := map[int]bool{}
		for _, p := range ports {
			require.False(t, seen[p], "port %d drawn twice in %v", p, ports)
			seen[p] = true
		}
	}
}

// TestAClusterWhosePortIsTakenMovesToOthers: a port drawn free can be taken
// before the server binds it (another test binary's server). The server
// that exits for it sends the cluster to new ports instead of failing the
// campaign after a minute of asking a stranger for its health.
func TestAClusterWhosePortIsTakenMovesToOthers(t *testing.T) {
	bin := natsServerBinary(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	draws := 0
	drawPorts = func(n int) ([]int, error) {
		draws++
		ports, err := freePorts(n)
		if draws == 1 && err == nil {
			ports[2] = takenPort // n0's monitoring port
		}
		return ports, err
	}
	t.Cleanup(func() { drawPorts = freePorts })

	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	require.NoError(t, os.MkdirAll(logs, 0o755))
	c, err := startCluster(context.Background(), bin, dir, "", logs)
	require.NoError(t, err)
	defer c.close()
	require.Equal(t, 2, draws, "the cluster moved to a second set of ports")
	require.NotEqual(t, takenPort, c.nodes[0].monPort)
	if c.ownStore {
		// A store of its own (on /dev/shm) goes with the cluster.
		require.DirExists(t, filepath.Join(c.store, "n0"))
		c.close()
		require.NoDirExists(t, c.store)
	}
	log, err := os.ReadFile(filepath.Join(logs, "nats-n0-001.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "address already in use", "n0's first start found its port taken")
}

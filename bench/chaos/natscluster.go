package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// clusterSize is the number of nats-server processes of the cluster
// topology: the smallest cluster that survives the loss of one server.
const clusterSize = 3

// natsCluster is three nats-server processes, children of the harness, with
// JetStream on file storage (sync_interval: always) and routes between them
// on loopback. Every connection goes through a Toxiproxy proxy: one in front
// of each server's client port, which idem and the publisher use (never the
// servers' own ports), and one per direction of every route, so that a
// server's routes can be cut while it keeps running and serving its
// clients: a minority partitioned away.
type natsCluster struct {
	bin   string
	dir   string
	store string // the servers' stores, one directory each
	// ownStore: the cluster made store (natsStoreDir) and removes it at close.
	ownStore bool
	logs     string
	tox      *toxiproxy.ApiServer

	nodes []*natsNode
	// routes[i][j] is the proxy server i dials to reach server j.
	routes [clusterSize][clusterSize]*toxiproxy.Proxy

	mu  sync.Mutex
	seq int
}

// natsNode is one server and its client proxy.
type natsNode struct {
	name       string
	clientPort int // the server's own client port: the harness's checker only
	routePort  int
	monPort    int
	client     *toxiproxy.Proxy
	conf       string
	logs       string

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{}
	incarnation int
	logFrom     int64 // where this incarnation's lines begin in its log
}

func (n *natsNode) logPath() string {
	return filepath.Join(n.logs, fmt.Sprintf("nats-%s-%03d.log", n.name, n.incarnation))
}

// clusterTries bounds how many sets of ports startCluster draws.
const clusterTries = 4

// startCluster writes the three configs, starts the proxies and the servers,
// and waits until every server reports JetStream healthy. The servers keep
// their stores in store, or where natsStoreDir says when it is empty. A
// port is free when drawn, not when the server binds it: another test
// binary can take it in between. A server that exits because its port was
// taken sends the whole cluster to a new set of ports, up to clusterTries
// times.
func startCluster(ctx context.Context, bin, dir, store, logs string) (*natsCluster, error) {
	owned := false
	if store == "" {
		store, owned = natsStoreDir(dir)
	}
	var err error
	for range clusterTries {
		var c *natsCluster
		if c, err = startClusterOnce(ctx, bin, dir, store, logs); err == nil {
			c.ownStore = owned
			return c, nil
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
		// Nothing was written but the servers' empty stores.
		if rmErr := os.RemoveAll(store); rmErr != nil {
			return nil, rmErr
		}
	}
	if owned {
		_ = os.RemoveAll(store)
	}
	return nil, err
}

// tmpfsMagic is a tmpfs's f_type in statfs(2).
const tmpfsMagic = 0x01021994

// natsStoreDir is where the servers keep their stores when the caller named
// none: a new directory on /dev/shm when that is a tmpfs with 2 GiB free
// (owned: the cluster removes it at close), else under dir. The harness
// kills processes, never the machine, so a tmpfs keeps every write a killed
// server made, as a disk's page cache does. Three servers syncing every
// write to a virtual machine's disk took a quarter of a 2-core machine's
// CPU in system time, and the fleet fell behind a workload it keeps up with
// on a tmpfs (1,450 against 1,900 acknowledgements a minute, the same seed,
// no faults).
func natsStoreDir(dir string) (store string, owned bool) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &fs); err == nil && int64(fs.Type) == tmpfsMagic && fs.Bavail*uint64(fs.Bsize) >= 2<<30 {
		if d, err := os.MkdirTemp("/dev/shm", "idem-chaos-nats-"); err == nil {
			return d, true
		}
	}
	return filepath.Join(dir, "store"), false
}

func startClusterOnce(ctx context.Context, bin, dir, store, logs string) (*natsCluster, error) {
	c := &natsCluster{bin: bin, dir: dir, store: store, logs: logs,
		tox: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
	ports, err := drawPorts(3 * clusterSize)
	if err != nil {
		c.close()
		return nil, err
	}
	for i := range clusterSize {
		n := &natsNode{name: fmt.Sprintf("n%d", i), logs: logs}
		n.clientPort, n.routePort, n.monPort = ports[3*i], ports[3*i+1], ports[3*i+2]
		n.client = toxiproxy.NewProxy(c.tox, "nats_"+n.name, "127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", n.clientPort))
		if err := n.client.Start(); err != nil {
			c.close()
			return nil, fmt.Errorf("chaos: toxiproxy for %s: %w", n.name, err)
		}
		c.nodes = append(c.nodes, n)
	}
	for i := range clusterSize {
		for j := range clusterSize {
			if i == j {
				continue
			}
			p := toxiproxy.NewProxy(c.tox, fmt.Sprintf("route_%d_%d", i, j), "127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", c.nodes[j].routePort))
			if err := p.Start(); err != nil {
				c.close()
				return nil, fmt.Errorf("chaos: toxiproxy for route %d->%d: %w", i, j, err)
			}
			c.routes[i][j] = p
		}
	}
	for i, n := range c.nodes {
		n.conf = filepath.Join(dir, n.name+".conf")
		if err := os.WriteFile(n.conf, []byte(c.config(i)), 0o600); err != nil {
			c.close()
			return nil, err
		}
		if err := n.start(bin); err != nil {
			c.close()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := n.waitHealthy(ctx, time.Minute); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// config is server i's configuration. Clients learn the proxies' addresses
// (client_advertise), never the servers' own. Routes are explicit, through
// the proxies; a server advertises a route address nobody listens on, so
// that a peer which learns of it by gossip cannot route around a cut.
func (c *natsCluster) config(i int) string {
	n := c.nodes[i]
	var routes []string
	for j := range clusterSize {
		if j != i {
			routes = append(routes, "    nats-route://"+c.routes[i][j].Listen)
		}
	}
	return fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
client_advertise: %s
http: 127.0.0.1:%d
# Dead connections (a blackholed link) are noticed within seconds.
ping_interval: "2s"
ping_max: 3
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: chaos
  listen: 127.0.0.1:%d
  advertise: 127.0.0.1:1
  routes: [
%s
  ]
}
`, n.name, n.clientPort, n.client.Listen, n.monPort, filepath.Join(c.store, n.name), n.routePort, strings.Join(routes, "\n"))
}

// clientURLs is what idem and the publisher connect to: every server's
// proxy.
func (c *natsCluster) clientURLs() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, "nats://"+n.client.Listen)
	}
	return strings.Join(u, ",")
}

// directURLs are the servers' own client ports, for the harness's checker,
// which no fault may disturb.
func (c *natsCluster) directURLs() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort))
	}
	return strings.Join(u, ",")
}

func (c *natsCluster) node(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

func (n *natsNode) start(bin string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	n.incarnation++
	// Appended to: a cluster moved to other ports starts its servers' logs
	// again, after the first attempt's.
	f, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if n.logFrom, err = f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	cmd := exec.Command(bin, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start nats-server %s: %w", n.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.cmd, n.done = cmd, done
	return nil
}

// stop sends sig to the server and waits until it exited (SIGKILL after
// within). false if it was not running.
func (n *natsNode) stop(sig syscall.Signal, within time.Duration) bool {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return false
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(within):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	return true
}

// errPortTaken is a server that exited because one of its ports was taken.
var errPortTaken = errors.New("a port was taken")

// exited is the error of a server that is no longer running: errPortTaken
// when its log says a port was in use. Its process is forgotten, so that
// start runs it again.
func (n *natsNode) exited() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("chaos: nats-server %s is not running", n.name)
	}
	select {
	case <-n.done:
	default:
		return nil
	}
	n.cmd = nil
	log, _ := os.ReadFile(n.logPath())
	if int64(len(log)) >= n.logFrom && bytes.Contains(log[n.logFrom:], []byte("address already in use")) {
		return fmt.Errorf("chaos: nats-server %s exited: %w", n.name, errPortTaken)
	}
	return fmt.Errorf("chaos: nats-server %s exited", n.name)
}

// waitHealthy waits until the server's /healthz answers 200: it serves
// clients and its JetStream is current with the cluster. A server that
// exits fails the wait at once (another process may answer on its
// monitoring port).
func (n *natsNode) waitHealthy(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.monPort)
	var last string
	for {
		if err := n.exited(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: nats-server %s not healthy within %s: %s", n.name, within, last)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// restart starts server i again (same ports, same store) and waits until it
// is healthy.
func (c *natsCluster) restart(ctx context.Context, i int) error {
	var err error
	// The ports were just released; retry a start that lost a race for one.
	for range 20 {
		if err = c.nodes[i].start(c.bin); err == nil {
			if err = c.nodes[i].waitHealthy(ctx, 90*time.Second); !errors.Is(err, errPortTaken) {
				return err
			}
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return err
}

// down stops every server (SIGTERM): the whole cluster is gone.
func (c *natsCluster) down() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.stop(syscall.SIGTERM, 15*time.Second) })
	}
	wg.Wait()
}

// up starts every server that is not running and waits until all are
// healthy.
func (c *natsCluster) up() error {
	ctx := context.Background()
	for _, n := range c.nodes {
		if err := n.start(c.bin); err != nil {
			return err
		}
	}
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.waitHealthy(ctx, 2*time.Minute))
	}
	return errors.Join(errs...)
}

// cutRoutes blackholes every route to and from server i, both directions:
// data is dropped and connections stay open (a partition, not a clean
// close). It returns the function that heals the cut.
func (c *natsCluster) cutRoutes(i int) (heal func(), err error) {
	var proxies []*toxiproxy.Proxy
	for j := range clusterSize {
		if j != i {
			proxies = append(proxies, c.routes[i][j], c.routes[j][i])
		}
	}
	return c.toxics(proxies, "timeout", `{"timeout":0}`, "upstream", "downstream")
}

// clientToxic adds a toxic to the client proxies of the servers named by
// which (-1: all of them) and returns the function that removes it.
func (c *natsCluster) clientToxic(which int, kind, attrs string, streams ...string) (remove func(), err error) {
	var proxies []*toxiproxy.Proxy
	for i, n := range c.nodes {
		if which < 0 || which == i {
			proxies = append(proxies, n.client)
		}
	}
	return c.toxics(proxies, kind, attrs, streams...)
}

func (c *natsCluster) toxics(proxies []*toxiproxy.Proxy, kind, attrs string, streams ...string) (func(), error) {
	type added struct {
		p    *toxiproxy.Proxy
		name string
	}
	var done []added
	remove := func() {
		for _, a := range done {
			_ = a.p.Toxics.RemoveToxic(context.Background(), a.name)
		}
	}
	for _, p := range proxies {
		for _, s := range streams {
			c.mu.Lock()
			c.seq++
			name := fmt.Sprintf("%s_%s_%d", kind, s, c.seq)
			c.mu.Unlock()
			js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, s, attrs)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				remove()
				return nil, fmt.Errorf("chaos: add toxic %s to %s: %w", name, p.Name, err)
			}
			done = append(done, added{p, name})
		}
	}
	return remove, nil
}

func (c *natsCluster) close() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.stop(syscall.SIGTERM, 10*time.Second) })
	}
	wg.Wait()
	for _, n := range c.nodes {
		if n.client != nil {
			n.client.Stop()
		}
	}
	for i := range clusterSize {
		for j := range clusterSize {
			if p := c.routes[i][j]; p != nil {
				p.Stop()
			}
		}
	}
	if c.ownStore {
		_ = os.RemoveAll(c.store)
	}
}

// Ports are drawn below Linux's default ephemeral range (32768-60999),
// from which the kernel hands out every port asked for with :0 and every
// outgoing connection's local port: the other test binaries running beside
// the campaign take those by the thousand.
const (
	portsFrom = 20000
	portsTo   = 32768
)

// drawPorts is freePorts; a variable so a test can hand out a taken port.
var drawPorts = freePorts

// freePorts draws n free ports, all different: each listener stays open
// until every port is drawn. Drawn one after another and closed at once,
// two of one cluster's ports came out the same (a server's monitoring port
// was another's route port), and the cluster never became healthy.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 50*n {
			return nil, fmt.Errorf("chaos: no %d free ports in %d-%d", n, portsFrom, portsTo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", portsFrom+rand.IntN(portsTo-portsFrom)))
		if err != nil {
			continue
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

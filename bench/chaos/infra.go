package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/embeddednats"
)

// natsBox is the in-process NATS server, restartable on the same port and
// store as nats-server's own chaos tests bounce their servers.
type natsBox struct {
	mu    sync.Mutex
	srv   *embeddednats.Server
	store string
	port  int
	url   string
}

func startNATS(store string) (*natsBox, error) {
	s, err := embeddednats.Start(embeddednats.Options{StoreDir: store})
	if err != nil {
		return nil, err
	}
	port := s.Addr().(*net.TCPAddr).Port
	return &natsBox{srv: s, store: store, port: port, url: s.URL()}, nil
}

// down shuts the server down; up starts it again on the same port and store.
func (n *natsBox) down() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Stop()
		n.srv = nil
	}
}

func (n *natsBox) up() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return nil
	}
	var err error
	// The port was just released; a client reconnecting at that instant can
	// make the bind fail, so try for a while.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var s *embeddednats.Server
		s, err = embeddednats.Start(embeddednats.Options{StoreDir: n.store, Port: n.port})
		if err == nil {
			n.srv = s
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: restart NATS on port %d: %w", n.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// proxyLink is the Toxiproxy proxy between every idem process and PostgreSQL
// (or the object store), behind a listener of the harness's own at addr.
//
// Toxiproxy can wedge: a toxic whose reader is gone blocks on an
// unbounded channel send, and adding or removing a toxic then waits on it
// forever while holding the proxy's lock, so the proxy accepts no more
// connections (seen in a full campaign: the warehouse out of reach for 18
// minutes, the nemesis stuck in AddToxic; Toxiproxy issue 558). The front
// listener lets the harness throw such a proxy away: a toxic call that
// does not return within toxicWait starts a new proxy to the same
// upstream, closes every connection through the old one (the clients
// reconnect, as after a reset), and leaves the old one to its goroutines.
type proxyLink struct {
	addr  string
	front net.Listener

	mu       sync.Mutex
	proxy    *toxiproxy.Proxy
	upstream string
	conns    map[net.Conn]bool
	seq      int
	wedged   int           // proxies thrown away
	wait     time.Duration // toxicWait; shorter in tests
}

// toxicWait bounds a Toxiproxy call; a healthy one returns at once.
const toxicWait = 20 * time.Second

func startLink(upstream string) (*proxyLink, error) {
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: link: %w", err)
	}
	l := &proxyLink{addr: front.Addr().String(), front: front, upstream: upstream, conns: map[net.Conn]bool{}, wait: toxicWait}
	if l.proxy, err = newToxiproxy(upstream); err != nil {
		front.Close()
		return nil, err
	}
	go l.serve()
	return l, nil
}

func newToxiproxy(upstream string) (*toxiproxy.Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "link", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("chaos: toxiproxy: %w", err)
	}
	return p, nil
}

// serve pipes each connection of the front to the current proxy.
func (l *proxyLink) serve() {
	for {
		c, err := l.front.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		back := l.proxy.Listen
		l.mu.Unlock()
		b, err := net.DialTimeout("tcp", back, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns[c], l.conns[b] = true, true
		l.mu.Unlock()
		go l.pipe(c, b)
	}
}

func (l *proxyLink) pipe(c, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(b, c)
	go cp(c, b)
	<-done
	c.Close()
	b.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, b)
	l.mu.Unlock()
}

// bounded runs fn, a Toxiproxy call, within toxicWait; a call that does not
// return replaces the proxy (see proxyLink).
func (l *proxyLink) bounded(fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(l.wait):
	}
	l.mu.Lock()
	upstream := l.upstream
	l.mu.Unlock()
	if err := l.replace(upstream); err != nil {
		return err
	}
	return fmt.Errorf("chaos: toxiproxy wedged for %s: a new proxy replaced it", l.wait)
}

// replace points the front at a new proxy to upstream and closes every
// connection through the old one, which is left to stop on its own.
func (l *proxyLink) replace(upstream string) error {
	p, err := newToxiproxy(upstream)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.proxy
	l.proxy, l.upstream = p, upstream
	l.wedged++
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	go old.Stop() // may never return when wedged
	return nil
}

// toxic adds a toxic on the given streams ("upstream" is idem to
// PostgreSQL) and returns a function that removes it.
func (l *proxyLink) toxic(kind string, attrs string, streams ...string) (remove func(), err error) {
	l.mu.Lock()
	p := l.proxy
	l.mu.Unlock()
	var names []string
	removeAll := func() {
		_ = l.bounded(func() error {
			for _, n := range names {
				_ = p.Toxics.RemoveToxic(context.Background(), n)
			}
			return nil
		})
	}
	for _, s := range streams {
		l.mu.Lock()
		l.seq++
		name := fmt.Sprintf("%s_%s_%d", kind, s, l.seq)
		l.mu.Unlock()
		js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, s, attrs)
		if err := l.bounded(func() error {
			_, err := p.Toxics.AddToxicJson(strings.NewReader(js))
			return err
		}); err != nil {
			removeAll()
			return nil, fmt.Errorf("chaos: add toxic %s: %w", name, err)
		}
		names = append(names, name)
	}
	return removeAll, nil
}

// repoint sends the link's new connections to upstream, as a virtual IP
// moved to a promoted server would: a new proxy behind the same address,
// the old one's connections (already dead with the old server) closed.
// idem's config names that address only.
func (l *proxyLink) repoint(upstream string) error { return l.replace(upstream) }

func (l *proxyLink) close() {
	l.front.Close()
	l.mu.Lock()
	p := l.proxy
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { p.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(toxicWait):
	}
}

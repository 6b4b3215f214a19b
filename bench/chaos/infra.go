package chaos

import (
	"context"
	"fmt"
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

// dbLink is the Toxiproxy proxy between every idem process and PostgreSQL.
type dbLink struct {
	proxy *toxiproxy.Proxy
	addr  string
	seq   int
}

func startLink(upstream string) (*dbLink, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("chaos: toxiproxy: %w", err)
	}
	return &dbLink{proxy: p, addr: p.Listen}, nil
}

// toxic adds a toxic on the given streams ("upstream" is idem to
// PostgreSQL) and returns a function that removes it.
func (l *dbLink) toxic(kind string, attrs string, streams ...string) (remove func(), err error) {
	var names []string
	for _, s := range streams {
		l.seq++
		name := fmt.Sprintf("%s_%s_%d", kind, s, l.seq)
		js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, s, attrs)
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			for _, n := range names {
				_ = l.proxy.Toxics.RemoveToxic(context.Background(), n)
			}
			return nil, fmt.Errorf("chaos: add toxic %s: %w", name, err)
		}
		names = append(names, name)
	}
	return func() {
		for _, n := range names {
			_ = l.proxy.Toxics.RemoveToxic(context.Background(), n)
		}
	}, nil
}

// repoint sends the proxy's new connections to upstream, as a virtual IP
// moved to a promoted server would: the proxy stops (its connections,
// already dead with the old server, are closed), and listens again on the
// same address. idem's config names that address only.
func (l *dbLink) repoint(upstream string) error {
	return l.proxy.Update(&toxiproxy.Proxy{Listen: l.proxy.Listen, Upstream: upstream, Enabled: true})
}

func (l *dbLink) close() { l.proxy.Stop() }

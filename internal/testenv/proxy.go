package testenv

import (
	"database/sql"
	"io"
	"log"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// Proxy is a TCP proxy on loopback between a client and a server, for
// injecting network faults: Cut drops every connection through it and
// refuses new ones until Restore; Blackhole and HoldReplies stop
// forwarding (connections stay open, bytes wait) until Restore, as a link
// that drops every packet, or only the server's, would.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]struct{}
	up      chan struct{} // closed while client → server bytes flow
	down    chan struct{} // closed while server → client bytes flow
	flowing chan struct{} // a closed channel
	stopped chan struct{} // closed when the test ends: held bytes are dropped
}

// ViaProxy opens the test database of dialect ("postgres" or "mysql")
// through a loopback proxy that can cut it; t.Cleanup closes it.
func ViaProxy(t testing.TB, dialect string) (*sql.DB, *Proxy) {
	t.Helper()
	var driverName, dsn string
	var p *Proxy
	switch dialect {
	case "postgres":
		u, err := url.Parse(DSN("pgx"))
		if err != nil {
			t.Fatal(err)
		}
		p = NewProxy(t, u.Host)
		u.Host = p.Addr()
		driverName, dsn = "pgx", u.String()
	case "mysql":
		cfg, err := gomysql.ParseDSN(DSN("mysql"))
		if err != nil {
			t.Fatal(err)
		}
		p = NewProxy(t, cfg.Addr)
		cfg.Addr = p.Addr()
		cfg.Timeout = time.Second
		// The driver logs each cut connection; the test expects them.
		gomysql.SetLogger(log.New(io.Discard, "", 0))
		driverName, dsn = "mysql", cfg.FormatDSN()
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, p
}

// NewProxy starts a proxy on 127.0.0.1 to target; t.Cleanup stops it.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, up: open, down: open, flowing: open, stopped: make(chan struct{})}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		close(p.stopped)
		p.Cut()
	})
	return p
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Retarget sends new connections to target and closes every open one,
// as a virtual IP or a pooler moved to a promoted standby would.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.Cut()
	p.Restore()
}

// Blackhole stops forwarding in both directions until Restore.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up == p.flowing {
		p.up = make(chan struct{})
	}
	if p.down == p.flowing {
		p.down = make(chan struct{})
	}
}

// HoldReplies stops forwarding the server's bytes until Restore: requests
// reach the server, their replies do not come back.
func (p *Proxy) HoldReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down == p.flowing {
		p.down = make(chan struct{})
	}
}

// Restore accepts connections again and forwards what was held.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for _, gate := range []*chan struct{}{&p.up, &p.down} {
		if *gate != p.flowing {
			close(*gate)
			*gate = p.flowing
		}
	}
}

// gate returns the channel to wait on before forwarding a direction.
func (p *Proxy) gate(down bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if down {
		return p.down
	}
	return p.up
}

// forward copies src to dst, waiting at the direction's gate before each
// write.
func (p *Proxy) forward(dst, src net.Conn, down bool) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.gate(down):
			case <-p.stopped:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		go func() {
			server, err := net.Dial("tcp", target)
			if err != nil || !p.track(server) {
				client.Close()
				return
			}
			go p.forward(server, client, false)
			p.forward(client, server, true)
		}()
	}
}

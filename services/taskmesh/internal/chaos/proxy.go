package chaos

import (
	"io"
	"net"
	"sync"
	"time"
)

// proxy stands between one agent and the gateways' gRPC front doors, so
// the driver can cut the agent off the network: while cut it drops every
// open connection and refuses new ones (accepts and closes them at once),
// which the agent sees as the network failing. A new connection goes to
// the next gateway that accepts it, so an agent follows a restarted or
// killed gateway as a load balancer would send it on.
type proxy struct {
	lis       net.Listener
	upstreams []string

	mu    sync.Mutex
	cut   bool
	next  int
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(addr string, upstreams []string) (*proxy, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &proxy{lis: lis, upstreams: upstreams, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.pipe(c)
	}
}

// dial connects to the next upstream that accepts.
func (p *proxy) dial() (net.Conn, error) {
	var err error
	for range p.upstreams {
		p.mu.Lock()
		up := p.upstreams[p.next%len(p.upstreams)]
		p.next++
		p.mu.Unlock()
		var c net.Conn
		if c, err = net.DialTimeout("tcp", up, 2*time.Second); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func (p *proxy) pipe(down net.Conn) {
	defer p.wg.Done()
	up, err := p.dial()
	if err != nil {
		down.Close()
		return
	}
	if !p.track(down, up) {
		down.Close()
		up.Close()
		return
	}
	var copies sync.WaitGroup
	copies.Add(2)
	// Either direction ending ends both: a half-open connection would keep
	// the agent waiting on an answer that cannot come.
	go func() { defer copies.Done(); _, _ = io.Copy(up, down); up.Close(); down.Close() }()
	go func() { defer copies.Done(); _, _ = io.Copy(down, up); up.Close(); down.Close() }()
	copies.Wait()
	p.untrack(down, up)
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// setCut cuts the agent off (true) or heals the link (false).
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *proxy) close() {
	p.lis.Close()
	p.setCut(true)
	p.wg.Wait()
}

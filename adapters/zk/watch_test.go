package zklock_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// eventDropper is a TCP proxy to ZooKeeper that drops every watch event
// the server sends (frames with xid -1): a watch lost as go-zookeeper can
// lose one when it reconnects. Everything else passes.
type eventDropper struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
}

func dropEvents(t *testing.T, target string) *eventDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &eventDropper{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *eventDropper) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(server, client); server.Close() }()
		go func() { defer p.wg.Done(); p.filter(client, server); client.Close() }()
	}
}

// filter copies the server's length-prefixed frames to the client, all
// but the watch events. The first frame, the connect response, has no
// xid.
func (p *eventDropper) filter(dst io.Writer, src io.Reader) {
	var size [4]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(src, size[:]); err != nil {
			return
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
		copy(frame, size[:])
		if _, err := io.ReadFull(src, frame[4:]); err != nil {
			return
		}
		if !first && len(frame) >= 8 && int32(binary.BigEndian.Uint32(frame[4:8])) == -1 {
			continue
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// A waiter whose watch never fires still gets the lock once it is free:
// it looks at its predecessor again after PushFallback.
func TestLostWatch(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	holder := newLocker(t, testenv.ZK(t, addrs[:1], 10*time.Second))
	first, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.ZK(t, addrs[:1], 10*time.Second)
	deaf := testenv.ZK(t, []string{dropEvents(t, addrs[0]).ln.Addr().String()}, 10*time.Second)
	waiter := newLocker(t, deaf, func(c *dlock.Config) { c.PushFallback = 200 * time.Millisecond })
	got := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(ctx, name)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	for { // until the waiter's node is queued behind the holder's
		nodes, _, err := admin.Children(root + "/" + escapeName(name))
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a waiter whose watch was lost: %v", err)
	}
}

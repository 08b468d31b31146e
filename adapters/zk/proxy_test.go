package zklock_test

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// zkProxy is a TCP proxy to ZooKeeper that passes every frame after the
// connect handshake through the test's hooks, to inject faults the
// server cannot be made to show on demand. A frame is length-prefixed;
// a request's header is its xid and opcode, a reply's its xid, zxid and
// error code.
type zkProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	// toServer sees each request and toClient each reply; each returns
	// the frame to send on (nil: drop it) and whether to cut the
	// connection there, both sides, as a server that goes away does.
	toServer, toClient func(frame []byte) (out []byte, cut bool)
	// handshakeDelay holds each connect response back that long: a
	// client's first requests are made before it has a session.
	handshakeDelay time.Duration
}

func newZKProxy(t *testing.T, target string, handshakeDelay time.Duration, toServer, toClient func([]byte) ([]byte, bool)) *zkProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pass := func(f []byte) ([]byte, bool) { return f, false }
	if toServer == nil {
		toServer = pass
	}
	if toClient == nil {
		toClient = pass
	}
	p := &zkProxy{ln: ln, target: target, toServer: toServer, toClient: toClient, handshakeDelay: handshakeDelay}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *zkProxy) addr() string { return p.ln.Addr().String() }

func (p *zkProxy) serve() {
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
		cut := func() { client.Close(); server.Close() }
		p.wg.Add(2)
		go func() { defer p.wg.Done(); relay(server, client, 0, p.toServer); cut() }()
		go func() { defer p.wg.Done(); relay(client, server, p.handshakeDelay, p.toClient); cut() }()
	}
}

// relay copies src's frames to dst through hook; the first frame, the
// connect request or response, passes as it is, after delay.
func relay(dst io.Writer, src io.Reader, delay time.Duration, hook func([]byte) ([]byte, bool)) {
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
		out, cut := frame, false
		if first {
			time.Sleep(delay)
		} else {
			out, cut = hook(frame)
		}
		if cut {
			return
		}
		if out == nil {
			continue
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
	}
}

// ZooKeeper's request opcodes the tests look for.
const (
	opCreate          = 1
	opDelete          = 2
	opExists          = 3
	opGetData         = 4
	opGetChildren2    = 12
	opMulti           = 14
	opCreateContainer = 19
)

// opHandOff stands for a multi request that starts with a delete: a
// hand-off (handing.Transfer), where one that starts with a create makes a
// node (makeNode).
const opHandOff = -opMulti

// multiOpHeader is the size of the header of each operation, and of each
// result, in a multi request and its reply: type, done, error.
const multiOpHeader = 4 + 1 + 4

// replyHeader is the size of a reply's length and header: xid, zxid,
// error.
const replyHeader = 4 + 4 + 8 + 4

func xidOf(frame []byte) int32 { return int32(binary.BigEndian.Uint32(frame[4:8])) }

func opcodeOf(request []byte) int32 { return int32(binary.BigEndian.Uint32(request[8:12])) }

func errorOf(reply []byte) int32 { return int32(binary.BigEndian.Uint32(reply[16:20])) }

// pathOf is the path a create or getChildren2 request names.
func pathOf(request []byte) string {
	n := binary.BigEndian.Uint32(request[12:16])
	return string(request[16 : 16+n])
}

// createOf is the path a create request names, or a multi request whose
// first operation is a create (as makeNode sends), with multi telling
// which; ok is false for any other request.
func createOf(request []byte) (p string, multi, ok bool) {
	switch opcodeOf(request) {
	case opCreate:
		return pathOf(request), false, true
	case opMulti:
		if int32(binary.BigEndian.Uint32(request[12:16])) == opCreate {
			off := 12 + multiOpHeader
			n := binary.BigEndian.Uint32(request[off:])
			return string(request[off+4 : off+4+int(n)]), true, true
		}
	}
	return "", false, false
}

// createdPath is the path a successful reply to a create request names,
// or to a multi request that starts with one (multi); ok is false for a
// reply that made nothing. A multi request that failed has its error in
// its results, not always in the reply's header.
func createdPath(reply []byte, multi bool) (p string, ok bool) {
	if errorOf(reply) != 0 {
		return "", false
	}
	off := replyHeader
	if multi {
		if int32(binary.BigEndian.Uint32(reply[off:])) != opCreate {
			return "", false
		}
		off += multiOpHeader
	}
	n := binary.BigEndian.Uint32(reply[off:])
	return string(reply[off+4 : off+4+int(n)]), true
}

// withoutChildren rewrites a successful getChildren2 reply without the
// children that start with prefix.
func withoutChildren(reply []byte, prefix string) []byte {
	body := reply[replyHeader:]
	count := binary.BigEndian.Uint32(body)
	var kept []string
	off := 4
	for range count {
		n := int(binary.BigEndian.Uint32(body[off:]))
		if c := string(body[off+4 : off+4+n]); !strings.HasPrefix(c, prefix) {
			kept = append(kept, c)
		}
		off += 4 + n
	}
	out := append([]byte{}, reply[:replyHeader]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(kept)))
	for _, c := range kept {
		out = binary.BigEndian.AppendUint32(out, uint32(len(c)))
		out = append(out, c...)
	}
	out = append(out, body[off:]...) // the directory's Stat
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

package zklock_test

import (
	"context"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// lostCreate is a proxy that loses the replies to the first lose
// successful Creates under dir, cutting the connection at each. With
// hide, directory listings then leave out the node the latest lost Create
// made, until the client creates the node once more: a node the leader had
// not yet committed when the client looked for it after reconnecting.
type lostCreate struct {
	*zkProxy
	dir     string
	lose    int
	hide    bool
	mu      sync.Mutex
	creates map[int32]bool // xids of Creates under dir: true for a multi request
	lists   map[int32]bool // xids of listings of dir
	lost    []string       // the nodes whose Create replies were lost
	hidden  string         // the node listings leave out
}

func loseCreate(t *testing.T, target, dir string, lose int, hide bool, handshakeDelay time.Duration) *lostCreate {
	p := &lostCreate{dir: dir, lose: lose, hide: hide, creates: map[int32]bool{}, lists: map[int32]bool{}}
	p.zkProxy = newZKProxy(t, target, handshakeDelay, p.request, p.reply)
	return p
}

func (p *lostCreate) request(f []byte) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if created, multi, ok := createOf(f); ok && path.Dir(created) == p.dir {
		p.creates[xidOf(f)] = multi
		if len(p.lost) == p.lose {
			p.hidden = "" // made once more: every node is committed now
		}
	}
	if opcodeOf(f) == opGetChildren2 {
		p.lists[xidOf(f)] = pathOf(f) == p.dir
	}
	return f, false
}

func (p *lostCreate) reply(f []byte) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	xid := xidOf(f)
	if multi, ok := p.creates[xid]; ok && len(p.lost) < p.lose {
		created, ok := createdPath(f, multi)
		if !ok {
			return f, false
		}
		node := path.Base(created)
		p.lost = append(p.lost, node)
		if p.hide {
			p.hidden = node
		}
		return nil, true
	}
	if p.lists[xid] && p.hidden != "" && errorOf(f) == 0 {
		return withoutChildren(f, p.hidden), false
	}
	return f, false
}

// guid is the GUID prefix of the lost Creates' nodes, "" before the first
// loss.
func (p *lostCreate) guid() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lost) == 0 {
		return ""
	}
	return p.lost[0][:len(p.lost[0])-10] // without the sequence
}

// A Lock whose Create reply was lost and whose node the search after the
// reconnect missed makes the node again; the first, queued ahead of it,
// must not stay behind (it would block the lock, this Lock too, for as
// long as the session lives).
func TestLostCreateLeavesNoStrayNode(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	name := dlocktest.Name(t)
	p := loseCreate(t, addrs[0], root+"/"+escapeName(name), 1, true, 0)
	lockAfterLostCreate(t, testenv.ZK(t, []string{p.addr()}, 10*time.Second), p, name)
}

// Two Create replies of one Lock lost, and the search after the second
// finds only the first's node, the second's not yet committed: the node
// kept must not be one that the second's can follow in the queue (it
// would block the lock after this hold's release).
func TestTwoLostCreatesLeaveNoStrayNode(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	name := dlocktest.Name(t)
	p := loseCreate(t, addrs[0], root+"/"+escapeName(name), 2, true, 0)
	lockAfterLostCreate(t, testenv.ZK(t, []string{p.addr()}, 10*time.Second), p, name)
}

// A Lock called before the connection has its first session (zk.Connect
// returns at once), whose Create's reply is lost: the session the Create
// went out in is the one the connection then has, so the node is looked
// for, not made again behind itself.
func TestLostCreateBeforeTheFirstSession(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	name := dlocktest.Name(t)
	p := loseCreate(t, addrs[0], root+"/"+escapeName(name), 1, false, 300*time.Millisecond)
	conn, _, err := zk.Connect([]string{p.addr()}, 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if conn.SessionID() != 0 {
		t.Fatal("the connection has a session already: the case is not made")
	}
	lockAfterLostCreate(t, conn, p, name)
}

// lockAfterLostCreate locks name through conn, whose proxy p loses a
// Create's reply, and checks that the lock's directory holds the held node
// alone, and nothing after Unlock.
func lockAfterLostCreate(t *testing.T, conn *zk.Conn, p *lostCreate, name string) {
	t.Helper()
	l := newLocker(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock after a lost Create reply: %v", err)
	}
	admin := testenv.ZK(t, testenv.ZKAddrs(t)[:1], 10*time.Second)
	lost := p.guid()
	if lost == "" {
		t.Fatal("no Create reply was lost: the fault was not injected")
	}
	nodes, _, err := admin.Children(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || !strings.HasPrefix(nodes[0], lost) {
		t.Fatalf("nodes while held: %v, want one, the held node (GUID %s)", nodes, lost)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes, _, err := admin.Children(p.dir); err != nil || len(nodes) != 0 {
		t.Fatalf("nodes after Unlock: %v (%v)", nodes, err)
	}
}

// A connection lost while Lock creates the lock's directory: Lock waits
// for the connection and goes on, as for any other request.
func TestConnectionLostCreatingTheDirectory(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	var cut atomic.Bool
	p := newZKProxy(t, addrs[0], 0, func(request []byte) ([]byte, bool) {
		if opcodeOf(request) == opCreateContainer && cut.CompareAndSwap(false, true) {
			return nil, true
		}
		return request, false
	}, nil)
	l := newLocker(t, testenv.ZK(t, []string{p.addr()}, 10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	lease, err := l.Lock(ctx, dlocktest.Name(t))
	if !cut.Load() {
		t.Fatal("no directory create was cut: the fault was not injected")
	}
	if err != nil {
		t.Fatalf("Lock with the connection lost creating the directory: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A read Lock called before the connection's first session, whose first
// look at the queue loses its reply: the look is made again in that
// session, as any request of a live session is, and the Lock goes on.
func TestLostListingBeforeTheFirstSession(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	var cut atomic.Bool
	var lists sync.Map // xids of listings
	p := newZKProxy(t, addrs[0], 300*time.Millisecond, func(request []byte) ([]byte, bool) {
		if opcodeOf(request) == opGetChildren2 {
			lists.Store(xidOf(request), true)
		}
		return request, false
	}, func(reply []byte) ([]byte, bool) {
		if _, ok := lists.Load(xidOf(reply)); ok && cut.CompareAndSwap(false, true) {
			return nil, true
		}
		return reply, false
	})
	conn, _, err := zk.Connect([]string{p.addr()}, 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	rw, err := zklock.NewReadWrite(conn, root)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Closing(t, rw.Read)
	testenv.Closing(t, rw.Write)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	lease, err := rw.Read.Lock(ctx, dlocktest.Name(t))
	if !cut.Load() {
		t.Fatal("no listing reply was lost: the fault was not injected")
	}
	if err != nil {
		t.Fatalf("read Lock with its first listing lost: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

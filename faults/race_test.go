package faults_test

import (
	"strings"
	"testing"
)

// raceExit is the exit code of a process whose race detector reported a
// race (GORACE's exitcode, 66 by default).
const raceExit = 66

// upstreamRacePkg is the package whose own race onlyUpstreamRaces lets
// pass: go-zookeeper reads Conn.lastZxid in sendSetWatches while the new
// connection's recvLoop writes it, on a reconnect with watches set
// (go-zookeeper/zk PR #35, open; v1.0.4 is the newest release). The
// value is a zxid the server only uses to replay watch events.
const upstreamRacePkg = "github.com/go-zookeeper/zk."

// onlyUpstreamRaces reports whether stderr holds race reports and, in
// every one, both conflicting accesses are in go-zookeeper's own code: a
// race with any frame of dlock at the top of either access is not.
func onlyUpstreamRaces(stderr string) bool {
	reports := strings.Split(stderr, "WARNING: DATA RACE")
	if len(reports) < 2 {
		return false
	}
	for _, r := range reports[1:] {
		r, _, _ = strings.Cut(r, "==================")
		accesses := 0
		lines := strings.Split(r, "\n")
		for i, l := range lines {
			l = strings.TrimSpace(l)
			if !strings.HasSuffix(l, ":") || !isAccess(l) {
				continue
			}
			accesses++
			if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), upstreamRacePkg) {
				return false
			}
		}
		if accesses != 2 {
			return false
		}
	}
	return true
}

// isAccess tells the line that heads one of a race report's two
// accesses, whose next line is its top frame.
func isAccess(l string) bool {
	for _, p := range []string{"Write at", "Read at", "Previous write at", "Previous read at"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// The harness lets pass go-zookeeper's own race, and nothing else.
func TestOnlyUpstreamRaces(t *testing.T) {
	const upstream = `zk: connected
==================
WARNING: DATA RACE
Write at 0x00c0000d6300 by goroutine 33:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
  github.com/go-zookeeper/zk.(*Conn).loop.func2()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:474 +0x1c4

Previous read at 0x00c0000d6300 by goroutine 18:
  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x49d

Goroutine 33 (running) created at:
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:466 +0x53e
==================
zk: recv loop terminated
Found 1 data race(s)
`
	ours := strings.Replace(upstream, "  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()", "  github.com/dlockhq/dlock/adapters/zk.(*backend).Acquire()", 1)
	for _, c := range []struct {
		name, stderr string
		want         bool
	}{
		{"go-zookeeper's own race", upstream, true},
		{"a race with dlock's code on one side", ours, false},
		{"the upstream race and one of dlock's", upstream + ours, false},
		{"no race report", "zk: connected\n", false},
	} {
		if got := onlyUpstreamRaces(c.stderr); got != c.want {
			t.Errorf("%s: onlyUpstreamRaces = %v, want %v", c.name, got, c.want)
		}
	}
}

package faults

import (
	"strings"
	"testing"
	"time"
)

func acq(client int, call, ret int64, token uint64) Op {
	return Op{Client: client, Kind: Acquire, Call: call, Return: ret, Outcome: OK, Token: token}
}

func rel(client int, call, ret int64, outcome Outcome) Op {
	return Op{Client: client, Kind: Release, Call: call, Return: ret, Outcome: outcome}
}

// lost is a Release that reported the loss of a lease whose Done was seen
// closed at done.
func lost(client int, done, call, ret int64) Op {
	op := rel(client, call, ret, Lost)
	op.Done = done
	return op
}

func paused(op Op) Op {
	op.Paused = true
	return op
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name    string
		history []Op
		ok      bool
		want    string // in a violation, when not ok
	}{
		{"one after another", []Op{acq(0, 0, 1, 1), rel(0, 2, 3, OK), acq(1, 1, 4, 2), rel(1, 5, 6, OK)}, true, ""},
		{"two holders at once", []Op{acq(0, 0, 1, 1), acq(1, 2, 3, 2), rel(0, 4, 5, OK), rel(1, 6, 7, OK)}, false, "not linearizable"},
		{"overlapping calls may order either way", []Op{acq(0, 0, 10, 2), acq(1, 1, 2, 1), rel(1, 3, 4, OK), rel(0, 11, 12, OK)}, true, ""},
		{"token goes back", []Op{acq(0, 0, 1, 5), rel(0, 2, 3, OK), acq(1, 4, 5, 4), rel(1, 6, 7, OK)}, false, "got token 4 after client 0 got 5"},
		{"equal tokens", []Op{acq(0, 0, 1, 5), rel(0, 2, 3, OK), acq(1, 4, 5, 5), rel(1, 6, 7, OK)}, false, "token 5"},
		// The lease rule: a holder must see Done close before a successor
		// is granted; its Unlock reporting the loss afterwards is too late.
		{"lost lease, Done closed first", []Op{acq(0, 0, 1, 1), acq(1, 3, 4, 2), rel(1, 5, 6, OK), lost(0, 2, 7, 8)}, true, ""},
		{"lost lease, Done closed after the successor's grant", []Op{acq(0, 0, 1, 1), acq(1, 2, 3, 2), rel(1, 4, 5, OK), lost(0, 6, 7, 8)}, false, "not linearizable"},
		{"lost lease reported only by Unlock", []Op{acq(0, 0, 1, 1), acq(1, 2, 3, 2), rel(1, 4, 5, OK), rel(0, 6, 7, Lost)}, false, "not linearizable"},
		// A frozen holder cannot be told anything: it may be overtaken.
		{"paused holder overtaken", []Op{paused(acq(0, 0, 1, 1)), acq(1, 2, 3, 2), rel(1, 4, 5, OK), rel(0, 6, 7, Lost)}, true, ""},
		// The same history with the loss not reported is a violation.
		{"lost lease unreported", []Op{acq(0, 0, 1, 1), acq(1, 2, 3, 2), rel(1, 4, 5, OK), rel(0, 6, 7, OK)}, false, "not linearizable"},
		// A killed holder never releases: its lease ends some time later.
		{"holder killed", []Op{acq(0, 0, 1, 1), acq(1, 2, 30, 2), rel(1, 31, 32, OK)}, true, ""},
		{"unknown acquire left out", []Op{{Client: 0, Kind: Acquire, Call: 0, Return: 9, Outcome: Unknown}, acq(1, 1, 2, 1), rel(1, 3, 4, OK)}, true, ""},
		{"refused while held", []Op{acq(0, 0, 1, 1), {Client: 1, Kind: Acquire, Call: 2, Return: 3, Outcome: Refused}, rel(0, 4, 5, OK)}, true, ""},
		{"refused while free", []Op{acq(0, 0, 1, 1), rel(0, 2, 3, OK), {Client: 1, Kind: Acquire, Call: 4, Return: 5, Outcome: Refused}}, false, "not linearizable"},
		{"release without a grant", []Op{rel(0, 0, 1, OK)}, false, "released without holding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Check(c.history, 10*time.Second)
			if res.OK() != c.ok {
				t.Fatalf("Check: %v, want ok=%v", res, c.ok)
			}
			if !c.ok && !strings.Contains(strings.Join(res.Violations, "; "), c.want) {
				t.Fatalf("violations %q do not mention %q", res.Violations, c.want)
			}
		})
	}
}

func TestNowIsMonotonic(t *testing.T) {
	a := Now()
	time.Sleep(time.Millisecond)
	if b := Now(); b-a < int64(time.Millisecond) {
		t.Fatalf("Now advanced %dns over a 1ms sleep", b-a)
	}
}

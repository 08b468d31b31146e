package schedlocktest

import (
	"testing"
	"time"
)

// TestMiscounted: a run late by lockAtLeastFor counts for the next slot,
// whose nodes found it taken, and a run so late that its lockAtLeastFor
// covered the next slot's start excuses that slot; a second run sooner
// than that, or a slot nobody ran while the lock was free, is miscounted.
func TestMiscounted(t *testing.T) {
	const atLeast = 250 * time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name  string
		runs  map[int][]run
		bad   int
		late  int
		slots int
	}{
		{"each once", map[int][]run{0: {{"a", at(0), at(5)}}, 1: {{"b", at(400), at(405)}}}, 0, 0, 2},
		{"late run is the next slot's", map[int][]run{0: {{"a", at(0), at(5)}, {"b", at(200), at(260)}}}, 0, 1, 2},
		{"two runs within lockAtLeastFor", map[int][]run{0: {{"a", at(0), at(5)}, {"b", at(10), at(20)}}, 1: {{"c", at(400), at(405)}}}, 1, 0, 2},
		{"late run beside an on-time one", map[int][]run{0: {{"a", at(0), at(5)}, {"b", at(200), at(260)}}, 1: {{"c", at(400), at(405)}}}, 1, 1, 2},
		{"a slot nobody ran", map[int][]run{0: {{"a", at(0), at(5)}}}, 1, 0, 2},
		{"a child's run", map[int][]run{0: {{"child", time.Time{}, time.Time{}}}, 1: {{"b", at(400), at(405)}}}, 0, 0, 2},
		{"a late run held the next slot over", map[int][]run{0: {{"a", at(300), at(310)}}}, 0, 1, 2},
		// b's acquisition took 260 ms: late for slot 0, it is slot 1's
		// run, once; slots 2 and 3 ran on time and count as such.
		{"a slow acquisition moves one run, once", map[int][]run{
			0: {{"a", at(0), at(5)}, {"b", at(100), at(360)}},
			2: {{"c", at(800), at(805)}},
			3: {{"d", at(1200), at(1205)}},
		}, 0, 1, 4},
		{"a slot missed with the lock free", map[int][]run{0: {{"a", at(0), at(100)}}, 2: {{"c", at(800), at(805)}}}, 1, 0, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runs{n: c.runs}
			bad, late := r.miscounted(c.slots, atLeast, func(slot int) time.Time { return at(400 * slot) })
			if len(bad) != c.bad || late != c.late {
				t.Errorf("miscounted = %q, %d late; want %d miscounted, %d late", bad, late, c.bad, c.late)
			}
		})
	}
}

package advisory_test

import (
	"testing"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

// TestQueryModes runs the conformance, election and job suites on
// PostgreSQL under pgx's other query modes: simple_protocol is what
// users behind PgBouncer set, and it sends every argument as a literal
// the server types from its context.
func TestQueryModes(t *testing.T) {
	testenv.OnPGModes(t, newLocker, func(t *testing.T, h dlocktest.Harness) {
		t.Run("Conformance", func(t *testing.T) { dlocktest.Run(t, h) })
		t.Run("Election", func(t *testing.T) {
			electiontest.Run(t, electiontest.Harness{New: h.New, Broken: h.Broken})
		})
		t.Run("Jobs", func(t *testing.T) { schedlocktest.Run(t, schedlocktest.Harness{New: h.New}) })
	})
}

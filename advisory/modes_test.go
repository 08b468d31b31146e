package advisory_test

import (
	"testing"

	"github.com/dlockhq/dlock/internal/testenv"
)

// TestQueryModes runs the conformance, election and job suites on
// PostgreSQL under pgx's other query modes: simple_protocol is what
// users behind PgBouncer set, and it sends every argument as a literal
// the server types from its context.
func TestQueryModes(t *testing.T) { testenv.OnPGModes(t, newLocker, testenv.Suites) }

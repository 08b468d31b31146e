package advisory_test

import (
	"testing"

	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/testenv"
)

// A Locker on a pgx pool, without database/sql, passes the conformance
// suite; closing it leaves the pool to its owner.
func TestNewPoolConformance(t *testing.T) { testenv.OnPgxPool(t, advisory.NewPool) }

package tablelock_test

import (
	"testing"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func TestElection(t *testing.T) {
	testenv.OnSQL(t, newLocker, func(t *testing.T, h dlocktest.Harness) {
		electiontest.Run(t, electiontest.Harness{New: h.New, Broken: h.Broken})
	})
}

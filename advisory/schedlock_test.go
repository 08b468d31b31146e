package advisory_test

import (
	"testing"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

func TestSchedlock(t *testing.T) {
	testenv.OnSQL(t, newLocker, func(t *testing.T, h dlocktest.Harness) {
		schedlocktest.Run(t, schedlocktest.Harness{New: h.New})
	})
}

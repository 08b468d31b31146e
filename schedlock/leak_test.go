package schedlock_test

import (
	"testing"

	"github.com/dlockhq/dlock/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

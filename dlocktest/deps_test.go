package dlocktest_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A third-party backend runs the suites by importing dlocktest: that must
// not pull in dlock's backends, the seckill module or their drivers.
func TestNoBackendDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/dlockhq/dlock/dlocktest").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/seckill", "/adapters/", "/advisory", "/tablelock", "/pessimistic", "/optimistic",
			"go-redis", "go-zookeeper", "jackc/pgx", "go-sql-driver", "golang-migrate"} {
			if strings.Contains(dep, banned) {
				t.Errorf("dlocktest depends on %s", dep)
			}
		}
	}
}

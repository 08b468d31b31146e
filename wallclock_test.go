package dlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Leases must not depend on the client's wall clock: a jump of it must
// neither end a lease early nor keep it past its deadline. Go's time.Time
// carries a monotonic reading that Sub, Until, Before and After use, unless
// code strips it (Round(0), Truncate) or goes through Unix time. This test
// fails if the lease paths of any backend start doing so. (The suite does
// not jump the machine's clock: the servers on it would jump too.)
func TestLeasesIgnoreTheWallClock(t *testing.T) {
	unix := map[string]bool{"Unix": true, "UnixNano": true, "UnixMilli": true, "UnixMicro": true}
	fset := token.NewFileSet()
	for _, dir := range []string{".", "tablelock", "advisory", "adapters/redis", "adapters/zk"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				name := sel.Sel.Name
				switch {
				case unix[name]:
					t.Errorf("%s: %s: lease code uses Unix (wall clock) time", fset.Position(call.Pos()), name)
				case (name == "Round" || name == "Truncate") && len(call.Args) == 1:
					if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Value == "0" {
						t.Errorf("%s: %s(0) strips the monotonic reading", fset.Position(call.Pos()), name)
					}
				}
				return true
			})
		}
		if checked == 0 {
			t.Fatalf("no Go files found in %s", dir)
		}
	}
}

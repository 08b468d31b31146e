package sqldialect

import "testing"

func TestMySQLInline(t *testing.T) {
	got := MySQLInline("SELECT ?, ?, ?, ?", "a'b\\", int64(-3), uint64(18446744073709551615), "")
	want := `SELECT X'6127625c', -3, 18446744073709551615, X''`
	if got != want {
		t.Fatalf("MySQLInline = %s, want %s", got, want)
	}
	for _, f := range []func(){
		func() { MySQLInline("SELECT ?", "a", "b") },
		func() { MySQLInline("SELECT ?, ?", "a") },
		func() { MySQLInline("SELECT ?", 1.5) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a mismatch did not panic")
				}
			}()
			f()
		}()
	}
}

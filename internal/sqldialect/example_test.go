package sqldialect_test

import (
	"fmt"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// Arguments go into the statement as literals, so go-sql-driver/mysql
// runs it in one round trip instead of a prepare, an execute and a close.
func ExampleMySQLInline() {
	fmt.Println(sqldialect.MySQLInline("SELECT GET_LOCK(?, ?)", "it's", 10))
	// Output: SELECT GET_LOCK(X'69742773', 10)
}

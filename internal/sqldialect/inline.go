package sqldialect

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// MySQLInline returns query with each ? replaced by the next argument as
// a literal: strings as hex literals (X'…', which no byte can escape
// from), integers in decimal. go-sql-driver/mysql, unless the DSN sets
// interpolateParams, prepares every statement that has arguments: a round
// trip for the prepare and a statement to close, on top of the one that
// runs it. A statement without arguments runs in one round trip, as text.
// query must have no ? other than the markers; a count or type mismatch
// is a bug in the caller and panics.
func MySQLInline(query string, args ...any) string {
	var b strings.Builder
	b.Grow(len(query) + 64*len(args))
	rest := query
	for _, a := range args {
		i := strings.IndexByte(rest, '?')
		if i < 0 {
			panic(fmt.Sprintf("sqldialect: %d arguments for %d markers", len(args), strings.Count(query, "?")))
		}
		b.WriteString(rest[:i])
		rest = rest[i+1:]
		switch v := a.(type) {
		case string:
			b.WriteString("X'")
			b.WriteString(hex.EncodeToString([]byte(v)))
			b.WriteByte('\'')
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case uint64:
			b.WriteString(strconv.FormatUint(v, 10))
		case int:
			b.WriteString(strconv.Itoa(v))
		default:
			panic(fmt.Sprintf("sqldialect: cannot inline a %T", a))
		}
	}
	if strings.IndexByte(rest, '?') >= 0 {
		panic(fmt.Sprintf("sqldialect: %d arguments for %d markers", len(args), strings.Count(query, "?")))
	}
	b.WriteString(rest)
	return b.String()
}

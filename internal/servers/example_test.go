package servers_test

import (
	"fmt"

	"github.com/dlockhq/dlock/internal/servers"
)

// A DSN with a password can be logged once redacted.
func ExampleRedact() {
	fmt.Println(servers.Redact("postgres://app:secret@127.0.0.1:5432/app"))
	fmt.Println(servers.Redact("app:secret@tcp(127.0.0.1:3306)/app"))
	// Output:
	// postgres://app:xxx@127.0.0.1:5432/app
	// app:xxx@tcp(127.0.0.1:3306)/app
}

package testenv

import "github.com/dlockhq/dlock/internal/subproc"

// Buffer is a strings.Builder that one goroutine may write (a worker's
// stderr, a logger) while another reads it.
type Buffer = subproc.Buffer

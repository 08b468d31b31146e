package testenv

import (
	"strings"
	"sync"
)

// Buffer is a strings.Builder that one goroutine may write (a worker's
// stderr, a logger) while another reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

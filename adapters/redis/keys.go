package redislock

import "strings"

// Prefix starts every key dlock writes.
const Prefix = "dlock:"

// tagEscaper makes a name safe inside a hash tag: Redis Cluster hashes the
// text between the first '{' and the next '}', so neither may appear in
// it. The escape is reversible, so distinct names stay distinct keys.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// keys are one lock's keys; the hash tag puts them in one cluster slot.
type keys struct {
	lock, fence, channel string
	queue, timeouts      string // fair lock
	waiterPrefix         string // fair lock: + waiter id = its channel
}

func keysFor(name string) keys {
	tag := Prefix + "{" + tagEscaper.Replace(name) + "}"
	return keys{
		lock: tag, fence: tag + ":fence", channel: tag + ":released",
		queue: tag + ":queue", timeouts: tag + ":queue-timeouts", waiterPrefix: tag + ":waiter:",
	}
}

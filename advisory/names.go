package advisory

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
)

// PostgresKey is the pg_advisory_lock key of a lock name: the 64-bit
// FNV-1a hash of its bytes. In pg_locks it shows as classid (high 32 bits)
// and objid (low 32 bits) with objsubid 1.
func PostgresKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// mysqlNameLimit is GET_LOCK's limit on a name's length.
const mysqlNameLimit = 64

// MySQLName is the GET_LOCK name of a lock name. MySQL compares lock names
// case-insensitively and limits them to 64 characters, so only names of
// at most 60 characters from [a-z0-9_.:-] are used as they are (prefixed
// "dl:"); all others become "dl#" and 60 hex digits of their SHA-256. The
// prefixes keep the two forms apart.
func MySQLName(name string) string {
	if len(name) <= mysqlNameLimit-4 && plain(name) {
		return "dl:" + name
	}
	sum := sha256.Sum256([]byte(name))
	return "dl#" + hex.EncodeToString(sum[:])[:mysqlNameLimit-4]
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

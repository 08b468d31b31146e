// Lock names and roots: what may be locked, and the node each name maps to.

package zklock

import (
	"fmt"
	"path"
	"strings"

	"github.com/dlockhq/dlock"
)

// systemTree is ZooKeeper's own tree (quotas, configuration).
const systemTree = "/zookeeper"

func validRoot(root string) error {
	if !strings.HasPrefix(root, "/") || (len(root) > 1 && strings.HasSuffix(root, "/")) || path.Clean(root) != root ||
		strings.ContainsRune(root, 0) {
		return fmt.Errorf("zklock: invalid root path %q: want an absolute, clean path such as /dlock", root)
	}
	if root == systemTree || strings.HasPrefix(root, systemTree+"/") {
		return fmt.Errorf("zklock: invalid root path %q: %s is ZooKeeper's own tree", root, systemTree)
	}
	return nil
}

// Identity implements dlock.Identifier: the kind of lock and its root.
func (b *backend) Identity() string { return "zk-" + b.order.kind() + ":" + b.root + b.suffix }

// CheckName implements driver.NameChecker: under root "/", a name whose
// node would be ZooKeeper's own /zookeeper is refused.
func (b *backend) CheckName(name string) error {
	if b.dir(name) == systemTree {
		return fmt.Errorf("%w: %q under root / is ZooKeeper's own %s; use another root, such as /dlock", dlock.ErrInvalidName, name, systemTree)
	}
	return nil
}

// escape turns a lock name into one node name: bytes other than
// [A-Za-z0-9_-] become %XX, so '/', '.', '..', control and reserved
// characters cannot reach the path, and distinct names stay distinct.
func escape(name string) string {
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	return b.String()
}

func (b *backend) dir(name string) string {
	if b.root == "/" {
		return "/" + escape(name) + b.suffix
	}
	return b.root + "/" + escape(name) + b.suffix
}

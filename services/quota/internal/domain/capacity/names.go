package capacity

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxScopedName is the longest name ScopedName gives: a DNS label's 63
// characters, the longest name the operator can give a Kubernetes
// resource and the longest a queue definition may have.
const maxScopedName = 63

// ScopedName names a resource that belongs to one ⟨tenant, name⟩ pair —
// a tenant's Ray cluster on a cluster, the ClusterQueue of a tenant's GU
// quota — so that no two pairs ever share a name
// (docs/decisions/0106-names-scoped-to-a-tenant-are-unambiguous.md).
//
// The name reads prefix-tenant-name when that reads back one way only: the
// tenant is letters and digits (tenant ids may also hold '-' and '_', which
// would let ⟨x, y-w⟩ and ⟨x-y, w⟩ meet in "x-y-w"), name is a DNS label's
// characters, and the whole fits in 63. Otherwise it is prefix--readable-
// hash: the pair lower-cased with other characters as '-', cut to fit, and
// 12 hex digits of the SHA-256 of the exact pair. The double '-' keeps
// the two forms apart (a tenant id never starts with '-'), so a plain name
// can only meet a plain one, whose tenant it spells out, and a hashed one
// a hashed one of the same pair.
func ScopedName(prefix, tenant, name string) string {
	plain := prefix + "-" + tenant + "-" + name
	if len(plain) <= maxScopedName && alnum(tenant) && dnsLabel(name) {
		return plain
	}
	h := sha256.Sum256([]byte(tenant + "\x00" + name))
	hash := hex.EncodeToString(h[:])[:12]
	readable := []byte(strings.ToLower(tenant + "-" + name))
	for i, c := range readable {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			readable[i] = '-'
		}
	}
	head := prefix + "--"
	room := maxScopedName - len(head) - 1 - len(hash)
	r := string(readable)
	if len(r) > room {
		r = r[:room]
	}
	r = strings.Trim(r, "-")
	if r == "" {
		return head + hash
	}
	return head + r + "-" + hash
}

// alnum reports whether s is lower-case letters and digits, at least one.
func alnum(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// dnsLabel reports whether s is lower-case letters, digits and '-',
// starting and ending with a letter or digit.
func dnsLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

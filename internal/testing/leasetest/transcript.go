package leasetest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var (
	hexLeaseID   = regexp.MustCompile(`\b[0-9a-f]{16}\b`)
	jsonLeaseID  = regexp.MustCompile(`"lease":\d+`)
	remainingTTL = regexp.MustCompile(`remaining\(\d+s\)`)
	attachedKeys = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
)

// TranscriptNormalizer returns what makes the etcdctl output of two lease sessions (one against etcd, one
// against Cairn) comparable: hex lease IDs are numbered in order of appearance (ID1, ID2, ...), JSON's decimal
// lease IDs masked, remaining TTLs masked and attached keys sorted (etcd lists them in no order). The numbering
// is the returned function's own, so use one per session.
func TranscriptNormalizer() func(string) string {
	ids := map[string]string{}
	return func(s string) string {
		// JSON's decimal IDs first: a 16-digit one would otherwise pass for a hex ID.
		s = jsonLeaseID.ReplaceAllString(s, `"lease":ID`)
		s = hexLeaseID.ReplaceAllStringFunc(s, func(hex string) string {
			if _, ok := ids[hex]; !ok {
				ids[hex] = fmt.Sprintf("ID%d", len(ids)+1)
			}
			return ids[hex]
		})
		s = remainingTTL.ReplaceAllString(s, "remaining(N)")
		return attachedKeys.ReplaceAllStringFunc(s, func(m string) string {
			keys := strings.Fields(attachedKeys.FindStringSubmatch(m)[1])
			slices.Sort(keys)
			return "attached keys([" + strings.Join(keys, " ") + "])"
		})
	}
}

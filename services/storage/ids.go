package storage

import (
	"sync/atomic"
	"time"
)

// requestIDs generates cluster-unique request IDs as etcd's idutil does: the low 16 bits of the member ID, then
// 40 bits of the start time in milliseconds and an 8-bit counter that carries into the time part.
type requestIDs struct {
	prefix uint64
	suffix atomic.Uint64
}

const (
	idTimeBits  = 40
	idCountBits = 8
	idSuffixLen = idTimeBits + idCountBits
)

func newRequestIDs(memberID uint64, now time.Time) *requestIDs {
	g := &requestIDs{prefix: memberID << idSuffixLen}
	ms := uint64(now.UnixNano() / int64(time.Millisecond))
	g.suffix.Store(lowBits(ms, idTimeBits) << idCountBits)
	return g
}

// next returns a new ID.
func (g *requestIDs) next() uint64 {
	return g.prefix | lowBits(g.suffix.Add(1), idSuffixLen)
}

func lowBits(x uint64, n uint) uint64 { return x & (1<<n - 1) }

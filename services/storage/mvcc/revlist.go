package mvcc

import "sort"

// revBlockLen is how many versions one block of a revList holds once full.
const revBlockLen = 1024

// revList is a key's versions, oldest first, kept in blocks of revBlockLen: appending never copies what is
// already there, however long a key's history grows (a hot key written millions of times between compactions
// would otherwise copy its whole history every time the slice grows), and dropping a compacted prefix frees
// whole blocks. Only the last block is partly filled; the first may have a dropped prefix (skip).
type revList struct {
	blocks [][]keyVersion
	skip   int // versions dropped from the front of blocks[0]
}

// len is the number of versions.
func (l *revList) len() int {
	n := len(l.blocks)
	if n == 0 {
		return 0
	}
	return (n-1)*revBlockLen + len(l.blocks[n-1]) - l.skip
}

// at returns version i (0 is the oldest).
func (l *revList) at(i int) keyVersion {
	i += l.skip
	return l.blocks[i/revBlockLen][i%revBlockLen]
}

// last returns the newest version, if any.
func (l *revList) last() (keyVersion, bool) {
	if l.len() == 0 {
		return keyVersion{}, false
	}
	b := l.blocks[len(l.blocks)-1]
	return b[len(b)-1], true
}

// append adds kv as the newest version.
func (l *revList) append(kv keyVersion) {
	n := len(l.blocks)
	if n == 0 || len(l.blocks[n-1]) == revBlockLen {
		l.blocks = append(l.blocks, make([]keyVersion, 0, 1))
		n++
	}
	b := l.blocks[n-1]
	if len(b) == cap(b) { // grow by doubling, to exactly revBlockLen at most
		b = append(make([]keyVersion, 0, min(2*cap(b), revBlockLen)), b...)
	}
	l.blocks[n-1] = append(b, kv)
}

// search is sort.Search over the versions: the smallest i for which f(version i) is true, or len if none.
func (l *revList) search(f func(keyVersion) bool) int {
	return sort.Search(l.len(), func(i int) bool { return f(l.at(i)) })
}

// dropBefore drops the versions before i.
func (l *revList) dropBefore(i int) {
	if i <= 0 {
		return
	}
	if i >= l.len() {
		*l = revList{}
		return
	}
	i += l.skip
	whole := i / revBlockLen
	clear(l.blocks[:whole]) // let the dropped blocks go
	l.blocks = l.blocks[whole:]
	l.skip = i % revBlockLen
	if len(l.blocks) == 1 && l.skip > 0 {
		// The only block is also the one appended to: keep it from pinning what was dropped.
		l.blocks[0] = append([]keyVersion(nil), l.blocks[0][l.skip:]...)
		l.skip = 0
	}
}

// each calls f on every version, oldest first, until f returns false.
func (l *revList) each(f func(keyVersion) bool) {
	for bi, b := range l.blocks {
		if bi == 0 {
			b = b[l.skip:]
		}
		for _, kv := range b {
			if !f(kv) {
				return
			}
		}
	}
}

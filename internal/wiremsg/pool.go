package wiremsg

import (
	"math/bits"
	"sync"
)

// poolClasses bounds the pooled sizes: buffers up to 1<<(poolClasses-1) bytes (256 MiB) are pooled.
const poolClasses = 29

// Pool is a mem.BufferPool of byte slices in power-of-two size classes that, unlike gRPC's own pools, does not
// clear the slices it hands out: it is for buffers written in full before they are read, such as an answer
// encoded into one (clearing a LIST-sized buffer costs as much as writing it). The zero Pool is ready.
type Pool struct{ classes [poolClasses]sync.Pool }

// Get returns a slice of length n, its contents undefined.
func (p *Pool) Get(n int) *[]byte {
	class := bits.Len(uint(max(n, 1) - 1)) // 1<<class >= n
	if class >= poolClasses {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.classes[class].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<class)
	return &b
}

// Put returns a slice that Get handed out (others are left to the garbage collector).
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	class := bits.Len(uint(max(c, 1) - 1))
	if class >= poolClasses || c != 1<<class {
		return
	}
	p.classes[class].Put(b)
}

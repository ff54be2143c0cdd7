package watchhub

import "sync"

// outboxChunkFrames is how many frames one chunk of an outbox holds (8 KiB of 32-byte frames). A sender reads
// the clock once per chunk it writes (sender.go).
const outboxChunkFrames = 256

// outboxChunk is a fixed run of an outbox's frames.
type outboxChunk struct {
	frames [outboxChunkFrames]frame
	n      int // frames[:n] are queued
	next   *outboxChunk
}

// outbox is a stream's queue of frames, in order: a list of chunks drawn from the hub's chunkPool. A queue
// that grew by appending to a slice copied every frame on each doubling and kept the largest slice it ever
// reached, two per stream (one taken by the sender, one filling): at 100,000 watchers in 1,000 streams
// under overload the doubling was half a hub's CPU and the kept slices a gigabyte. Chunks never move once
// written, go back to the pool as soon as the sender has written them, and are shared by every stream, so a
// hub holds chunks for what is queued now, not for what each stream once held.
type outbox struct {
	head, tail *outboxChunk
	len        int
}

// push appends f, taking a chunk from pool when the last one is full.
func (o *outbox) push(f frame, pool *chunkPool) {
	if o.tail == nil || o.tail.n == outboxChunkFrames {
		c := pool.get()
		if o.tail == nil {
			o.head = c
		} else {
			o.tail.next = c
		}
		o.tail = c
	}
	o.tail.frames[o.tail.n] = f
	o.tail.n++
	o.len++
}

// release gives every chunk back to pool and leaves o empty.
func (o *outbox) release(pool *chunkPool) {
	for c := o.head; c != nil; {
		next := c.next
		pool.put(c)
		c = next
	}
	*o = outbox{}
}

// chunkPool recycles outbox chunks across a hub's streams. Its zero value is ready to use.
type chunkPool struct{ pool sync.Pool }

func (p *chunkPool) get() *outboxChunk {
	if c, ok := p.pool.Get().(*outboxChunk); ok {
		return c
	}
	return new(outboxChunk)
}

// put clears c (so that the pool pins no watcher or response) and keeps it for reuse.
func (p *chunkPool) put(c *outboxChunk) {
	clear(c.frames[:c.n])
	c.n, c.next = 0, nil
	p.pool.Put(c)
}

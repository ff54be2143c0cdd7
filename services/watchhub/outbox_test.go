package watchhub

import (
	"testing"
	"unsafe"
)

// outboxFrames copies o's frames out, in order.
func outboxFrames(o *outbox) []frame {
	var frames []frame
	for c := o.head; c != nil; c = c.next {
		frames = append(frames, c.frames[:c.n]...)
	}
	return frames
}

// TestOutboxKeepsOrderAcrossChunks: frames come out in the order pushed whatever the number of chunks, and a
// released outbox's chunks come back from the pool empty, pinning nothing.
func TestOutboxKeepsOrderAcrossChunks(t *testing.T) {
	watchers := make([]watcher, 3*outboxChunkFrames)
	for _, n := range []int{0, 1, outboxChunkFrames - 1, outboxChunkFrames, outboxChunkFrames + 1, 3 * outboxChunkFrames} {
		var pool chunkPool
		var o outbox
		for i := range n {
			o.push(frame{w: &watchers[i], counted: i%2 == 0}, &pool)
		}
		got := outboxFrames(&o)
		if o.len != n || len(got) != n {
			t.Fatalf("%d pushed: len %d, %d frames", n, o.len, len(got))
		}
		for i, f := range got {
			if f.w != &watchers[i] || f.counted != (i%2 == 0) {
				t.Fatalf("%d pushed: frame %d is not the %dth pushed", n, i, i)
			}
		}
		chunks := (n + outboxChunkFrames - 1) / outboxChunkFrames
		var held []*outboxChunk
		for c := o.head; c != nil; c = c.next {
			held = append(held, c)
		}
		if len(held) != chunks {
			t.Fatalf("%d pushed: %d chunks, want %d", n, len(held), chunks)
		}
		o.release(&pool)
		if o.head != nil || o.tail != nil || o.len != 0 {
			t.Fatalf("%d pushed: released outbox not empty: %+v", n, o)
		}
		for _, c := range held {
			if c.n != 0 || c.next != nil || c.frames[0].w != nil || c.frames[outboxChunkFrames-1].w != nil {
				t.Fatalf("%d pushed: a released chunk still holds frames", n)
			}
		}
	}
}

// TestFrameStaysSmall: a stream may queue WatcherBufferResponses live frames per watcher, so a frame's size is
// a hub's memory under overload (at 80 bytes, 100,000 watchers held half a gigabyte of frames).
func TestFrameStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(frame{}); size > 32 {
		t.Fatalf("a frame is %d bytes, want at most 32", size)
	}
}

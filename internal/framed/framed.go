// Package framed carries length-prefixed frames both ways over one connection, for the internal hops whose every
// microsecond counts (the frontend's calls to storage). A frame is a 4-byte big-endian length and that many bytes;
// what the bytes mean is the caller's business (Cairn sends protobuf messages).
//
// Why not a gRPC stream: a gRPC message goes through a writer goroutine that, for a small write, yields once before
// it flushes, so on a busy single-threaded process an answer waits for every other runnable goroutine, and each
// message pays HTTP/2 framing and flow-control bookkeeping on both sides. Here a sender that finds no write in
// progress writes at once, from its own goroutine; senders that arrive while a write is in progress leave their
// frames to it, so under load one write carries many frames and at rest a frame goes out without a hand-off.
//
// A Conn is safe for concurrent Send; Receive and ReceiveBorrowed are for one goroutine. A failed write or read breaks the Conn: every
// later Send fails with the error, and Done is closed.
package framed

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// MaxFrame bounds a frame's length (a range answer may be large: storage's RangeEncoded of a big LIST).
const MaxFrame = 1 << 30

// writeTimeout bounds one write: a peer that stops reading for this long is taken for gone.
const writeTimeout = 30 * time.Second

// maxPending bounds the bytes waiting behind a write in progress; a sender past it waits.
const maxPending = 64 << 20

// copyLimit is the largest part a Send copies into the shared buffer; larger ones are written in place.
const copyLimit = 8 << 10

// CopyLimit is the largest part Send copies before it returns; a larger part is written in place, from the
// caller's memory. A caller that would pass many small parts of a large frame joins them itself: copied one by
// one, they would grow the connection's write buffer past what it keeps between writes.
const CopyLimit = copyLimit

// What a connection keeps between writes: small parts are copied into buffers of tailSize bytes (or more); once
// written, up to keptTails of them are kept for the next writes, unless one grew past keptTailSize, and so are
// the write's lists unless they grew past maxKeptList entries (one large batch must not pin its memory for the
// connection's life).
const (
	tailSize     = 4096
	keptTailSize = 64 << 10
	keptTails    = 2
	maxKeptList  = 1024
)

// keptFrameSize bounds the frame buffer ReceiveBorrowed keeps between frames: a larger frame gets a buffer of its
// own, not kept, so one large batch does not pin its memory for the link's life.
const keptFrameSize = 256 << 10

// ErrClosed is returned by Send and Receive after Close.
var ErrClosed = errors.New("framed: connection closed")

// ErrNotQueued marks a Send error for a frame that was refused before any of it was queued (the connection was
// already broken, or the frame too large): none of it can reach the peer.
var ErrNotQueued = errors.New("framed: frame not queued")

// Conn is one framed connection.
type Conn struct {
	nc       net.Conn // read through (it may replay bytes a listener multiplexer sniffed)
	buffered atomic.Int64
	raw      net.Conn // written to and half-closed: nc, or the connection nc wraps
	reader   *bufio.Reader
	head     [4]byte // a frame's length as read (a local array would escape through io.ReadFull)
	frame    []byte  // ReceiveBorrowed's buffer for frames that do not fit the reader's; the receiver's alone

	mu       sync.Mutex
	room     *sync.Cond // signalled when a write finishes
	pending  net.Buffers
	releases []func()
	tail     []byte   // the last pending entry while it is ours to append to
	owned    [][]byte // the pending entries that are copies (tails), reused once written
	spare    [][]byte // written tails kept for reuse, emptied
	// The lists of a write that is done, emptied, for the next one (each write swaps its lists for these).
	freePending net.Buffers
	freeOwned   [][]byte
	out         net.Buffers // what the write in progress still has to write; the writer's alone
	size        int         // bytes pending
	writing     bool
	err         error
	done        chan struct{}
}

// New wraps nc.
func New(nc net.Conn) *Conn { return newConn(nc, nc) }

// newConn reads from nc and writes to raw, the connection nc wraps (or nc itself): writing to the TCP connection
// itself lets a flush of several buffers be one writev.
func newConn(nc, raw net.Conn) *Conn {
	c := &Conn{nc: nc, raw: raw, reader: bufio.NewReaderSize(nc, 64<<10), done: make(chan struct{})}
	c.room = sync.NewCond(&c.mu)
	return c
}

// Done is closed once the connection is broken or closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection broke, nil while it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close breaks the connection; pending frames are dropped.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.failLocked(ErrClosed)
	c.mu.Unlock()
	return nil
}

// Send sends one frame made of parts (at least one), in order. Small parts are copied and may be reused when Send returns; a part
// larger than copyLimit is written in place, and release (when not nil) is called once every such part has been
// written or dropped, so the caller can recycle it. Send returns once the frame is written or queued behind the
// write in progress; an error means the connection is broken and the frame will not be sent.
func (c *Conn) Send(release func(), parts ...[]byte) error { return c.send(flushNow, release, parts) }

// SendBatched is Send for a caller that knows more frames are on their way (it has other calls in flight): a
// sender that would write at once first yields, so the goroutines about to send join its write. Under load this
// turns many writes of one frame into one of many; a lone frame should go with Send, which does not wait.
func (c *Conn) SendBatched(release func(), parts ...[]byte) error {
	return c.send(batched, release, parts)
}

// Queue adds a frame to what the next write carries without writing it: for a caller that has more frames to
// send at once (the answers to calls already read, see Buffered). The frame goes out with the write in progress,
// if any, or with the next Send, SendBatched or Flush; the caller must make sure one comes.
func (c *Conn) Queue(release func(), parts ...[]byte) error { return c.send(queueOnly, release, parts) }

// Flush writes what Queue left, unless a write in progress takes it.
func (c *Conn) Flush() error { return c.send(flushNow, nil, nil) }

// Buffered reports how many bytes already read from the connection waited in Receive's buffer when it last
// returned: more than 0 means another frame (or its start) has arrived. Any goroutine may ask.
func (c *Conn) Buffered() int { return int(c.buffered.Load()) }

// How send writes.
const (
	flushNow  = iota // write at once unless a write is in progress
	batched          // the same, after yielding so others can join
	queueOnly        // leave the frame for the next write
)

func (c *Conn) send(mode int, release func(), parts [][]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxFrame {
		if release != nil {
			release()
		}
		return fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrNotQueued, n, MaxFrame)
	}
	c.mu.Lock()
	for c.err == nil && c.size > maxPending {
		c.room.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		if release != nil {
			release()
		}
		return fmt.Errorf("%w: %w", ErrNotQueued, err)
	}
	kept := false
	if parts != nil {
		c.appendLocked(binary.BigEndian.AppendUint32(make([]byte, 0, 4), uint32(n)))
	}
	for _, p := range parts {
		if len(p) > copyLimit {
			c.pending = append(c.pending, p)
			c.tail = nil
			c.size += len(p)
			kept = true
			continue
		}
		c.appendLocked(p)
	}
	if release != nil {
		if kept {
			c.releases = append(c.releases, release)
		} else {
			defer release()
		}
	}
	if c.writing || mode == queueOnly || len(c.pending) == 0 {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	if mode == batched {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	err := c.flushLocked()
	c.mu.Unlock()
	return err
}

// appendLocked copies p to the end of the pending bytes.
func (c *Conn) appendLocked(p []byte) {
	if c.tail == nil {
		c.tail = c.newTailLocked(len(p))
		c.pending = append(c.pending, nil)
		c.owned = append(c.owned, nil)
	}
	c.tail = append(c.tail, p...)
	c.pending[len(c.pending)-1] = c.tail
	c.owned[len(c.owned)-1] = c.tail
	c.size += len(p)
}

// newTailLocked returns an empty buffer for at least n bytes, a kept one when it fits: under load every write
// carries a tail, and a fresh one each time was the largest allocation on a leader storage's put path.
func (c *Conn) newTailLocked(n int) []byte {
	if last := len(c.spare) - 1; last >= 0 && cap(c.spare[last]) >= n {
		tail := c.spare[last]
		c.spare[last] = nil
		c.spare = c.spare[:last]
		return tail
	}
	return make([]byte, 0, max(tailSize, n))
}

// keepLocked keeps what a finished write used for the next ones: the tails it wrote, up to keptTails of at most
// keptTailSize bytes each, and its lists, emptied, unless a large batch grew them past maxKeptList.
func (c *Conn) keepLocked(batch net.Buffers, owned [][]byte) {
	for _, tail := range owned {
		if len(c.spare) < keptTails && cap(tail) <= keptTailSize {
			c.spare = append(c.spare, tail[:0])
		}
	}
	clear(batch)
	clear(owned)
	if cap(batch) <= maxKeptList && cap(owned) <= maxKeptList {
		c.freePending, c.freeOwned = batch[:0], owned[:0]
	}
}

// flushLocked writes what is pending until nothing is, letting other senders queue meanwhile; c.mu is held on
// entry and exit, and c.writing is true.
func (c *Conn) flushLocked() error {
	for len(c.pending) > 0 && c.err == nil {
		batch, releases, owned := c.pending, c.releases, c.owned
		c.pending, c.owned, c.freePending, c.freeOwned = c.freePending, c.freeOwned, nil, nil
		c.releases, c.tail, c.size = nil, nil, 0
		c.room.Broadcast()
		c.mu.Unlock()
		_ = c.raw.SetWriteDeadline(time.Now().Add(writeTimeout))
		c.out = batch // WriteTo consumes c.out; batch keeps the list for reuse
		_, err := c.out.WriteTo(c.raw)
		c.out = nil
		for _, release := range releases {
			release()
		}
		c.mu.Lock()
		if err != nil {
			c.failLocked(fmt.Errorf("framed: write to %s: %w", c.nc.RemoteAddr(), err))
		} else {
			c.keepLocked(batch, owned) // written: nothing reads them any more
		}
	}
	c.writing = false
	c.room.Broadcast()
	return c.err
}

// failLocked breaks the connection with err (the first error wins).
func (c *Conn) failLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	for _, release := range c.releases {
		release()
	}
	c.pending, c.releases, c.owned, c.spare, c.tail, c.size = nil, nil, nil, nil, nil, 0
	_ = c.nc.Close()
	close(c.done)
	c.room.Broadcast()
}

// Receive returns the next frame, in a buffer of its own that the caller keeps.
func (c *Conn) Receive() ([]byte, error) {
	n, err := c.readHead()
	if err != nil {
		return nil, err
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(c.reader, frame); err != nil {
		return nil, c.readFailed(err)
	}
	c.buffered.Store(int64(c.reader.Buffered()))
	return frame, nil
}

// ReceiveBorrowed returns the next frame in memory the Conn reuses: the frame is valid only until the next
// Receive or ReceiveBorrowed, so it suits a caller that is done with each frame before it asks for the next
// (proto.Unmarshal copies every bytes field it keeps). A frame that arrived whole in the read buffer is
// returned in place, without a copy; a larger one goes to a buffer kept for the next frames. A steady stream
// of frames then allocates nothing per frame, where Receive allocates each one.
func (c *Conn) ReceiveBorrowed() ([]byte, error) {
	n, err := c.readHead()
	if err != nil {
		return nil, err
	}
	var frame []byte
	if int(n) <= c.reader.Size() {
		// Peek waits for the whole frame; the slice stays valid until the next read, and Discard is not one.
		if frame, err = c.reader.Peek(int(n)); err == nil {
			_, err = c.reader.Discard(int(n))
		}
	} else {
		switch {
		case n > keptFrameSize:
			frame = make([]byte, n)
		case cap(c.frame) < int(n): // grown by half at least, so frames growing a little each time do not each allocate
			c.frame = make([]byte, n, max(int(n), min(cap(c.frame)*3/2, keptFrameSize)))
			fallthrough
		default:
			frame = c.frame[:n]
		}
		_, err = io.ReadFull(c.reader, frame)
	}
	if err != nil {
		return nil, c.readFailed(err)
	}
	c.buffered.Store(int64(c.reader.Buffered()))
	return frame, nil
}

// readHead reads a frame's length.
func (c *Conn) readHead() (uint32, error) {
	if _, err := io.ReadFull(c.reader, c.head[:]); err != nil {
		return 0, c.readFailed(err)
	}
	n := binary.BigEndian.Uint32(c.head[:])
	if n > MaxFrame {
		return 0, c.readFailed(fmt.Errorf("framed: frame of %d bytes exceeds %d", n, MaxFrame))
	}
	return n, nil
}

func (c *Conn) readFailed(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.failLocked(fmt.Errorf("framed: read from %s: %w", c.nc.RemoteAddr(), err))
	}
	return c.err
}

// Dial connects to addr and announces preamble, which the server's listener (cmux) recognizes the protocol by.
// With secure (not nil) the connection is TLS, handshaken before the preamble; the server must serve its port
// with the same link's Listener.
func Dial(addr, preamble string, timeout time.Duration, secure *tlsconfig.Link) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if nc, err = secure.Client(nc, addr); err != nil {
		return nil, err
	}
	return Open(nc, preamble, timeout)
}

// Open announces preamble on nc, a connection the caller dialed (and, for a TLS link, already wrapped with
// the link's Client: Dial does both), and returns the link on it; timeout bounds the write. On failure nc is
// closed.
func Open(nc net.Conn, preamble string, timeout time.Duration) (*Conn, error) {
	_ = nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(nc, preamble); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return New(nc), nil
}

// Accept takes a connection a client opened with Dial and preamble, checking the preamble. raw, when not nil, is
// the connection nc wraps (a listener multiplexer's, which replays what it sniffed): frames are read through nc
// and written to raw.
func Accept(nc, raw net.Conn, preamble string, timeout time.Duration) (*Conn, error) {
	if raw == nil {
		raw = nc
	}
	_ = nc.SetReadDeadline(time.Now().Add(timeout))
	got := make([]byte, len(preamble))
	if _, err := io.ReadFull(nc, got); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("framed: read preamble from %s: %w", nc.RemoteAddr(), err)
	}
	if string(got) != preamble {
		_ = nc.Close()
		return nil, fmt.Errorf("framed: %s sent preamble %q, want %q", nc.RemoteAddr(), got, preamble)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return newConn(nc, raw), nil
}

// CloseWrite ends this side of the connection after the frames sent so far, so the peer reads them and then the
// end, and gives the reading side linger more to see the peer's end (Receive then fails) before the connection
// is closed. Closing outright while the peer still sends would reset the connection and could lose the last
// frames on their way to it.
func (c *Conn) CloseWrite(linger time.Duration) {
	c.mu.Lock()
	for c.writing && c.err == nil {
		c.room.Wait() // the frames sent so far are on the wire
	}
	c.mu.Unlock()
	cw, ok := c.raw.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		_ = c.Close()
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(linger))
}

// PreambleMatcher tells, for a listener multiplexer (cmux.Matcher), a connection a client opened with Dial and
// preamble: it reads exactly the preamble's length, so it decides as soon as the preamble is in (cmux's
// PrefixMatcher waits for one byte more, which a pipeline opened ahead of its first call never sends).
func PreambleMatcher(preamble string) func(io.Reader) bool {
	return func(r io.Reader) bool {
		got := make([]byte, len(preamble))
		_, err := io.ReadFull(r, got)
		return err == nil && string(got) == preamble
	}
}

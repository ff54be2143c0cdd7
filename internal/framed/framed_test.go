package framed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testPreamble = "TEST/1\n"

// pair returns the two ends of a framed loopback TCP connection.
func pair(t testing.TB) (client, server *Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		nc, err := lis.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		c, err := Accept(nc, nil, testPreamble, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = Dial(lis.Addr().String(), testPreamble, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// frame is what sender s sends as its i-th frame: its identity, then filler of a size that depends on i, in parts.
func frame(s, i int) [][]byte {
	head := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(s)), uint32(i))
	sizes := []int{0, 10, copyLimit, copyLimit + 1, 100 << 10}
	body := bytes.Repeat([]byte{byte(s*31 + i)}, sizes[i%len(sizes)])
	return [][]byte{head, body[:len(body)/2], body[len(body)/2:]}
}

// TestFramesArriveWholeAndInOrder: frames sent concurrently, of every size around copyLimit, arrive whole and in
// each sender's order, and every release runs once.
func TestFramesArriveWholeAndInOrder(t *testing.T) {
	tests := []struct {
		name             string
		senders, perSend int
	}{
		{"one sender", 1, 200},
		{"many senders", 32, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := pair(t)
			var released atomic.Int64
			var wg sync.WaitGroup
			for s := range tt.senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tt.perSend {
						if err := client.Send(func() { released.Add(1) }, frame(s, i)...); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			next := make([]int, tt.senders)
			for range tt.senders * tt.perSend {
				got, err := server.Receive()
				if err != nil {
					t.Fatal(err)
				}
				s, i := int(binary.BigEndian.Uint32(got)), int(binary.BigEndian.Uint32(got[4:]))
				if i != next[s] {
					t.Fatalf("sender %d: frame %d arrived, want %d", s, i, next[s])
				}
				next[s]++
				if want := bytes.Join(frame(s, i), nil); !bytes.Equal(got, want) {
					t.Fatalf("sender %d frame %d: %d bytes arrived, want %d", s, i, len(got), len(want))
				}
			}
			wg.Wait()
			if n := released.Load(); n != int64(tt.senders*tt.perSend) {
				t.Fatalf("%d releases, want one per send (%d)", n, tt.senders*tt.perSend)
			}
		})
	}
}

// TestBrokenConnection: once the peer goes, Receive fails, Done closes and Send fails, releasing what it was given.
func TestBrokenConnection(t *testing.T) {
	client, server := pair(t)
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Receive(); err == nil {
		t.Fatal("Receive after the peer closed: no error")
	}
	select {
	case <-client.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed")
	}
	released := false
	if err := client.Send(func() { released = true }, []byte("late")); err == nil || !released {
		t.Fatalf("Send on a broken connection: %v, released %v; want an error and the release", err, released)
	}
	if !errors.Is(server.Err(), ErrClosed) {
		t.Fatalf("closed side's Err = %v, want ErrClosed", server.Err())
	}
}

// TestBadInput: a wrong preamble is refused, and a frame longer than MaxFrame breaks the connection.
func TestBadInput(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for i := 0; i < 2; i++ {
			nc, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				return
			}
			if i == 0 {
				fmt.Fprint(nc, "NOPE/1\n")
			} else {
				fmt.Fprint(nc, testPreamble)
				_, _ = nc.Write(binary.BigEndian.AppendUint32(nil, MaxFrame+1))
			}
			time.Sleep(100 * time.Millisecond)
			nc.Close()
		}
	}()
	nc, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Accept(nc, nil, testPreamble, 5*time.Second); err == nil {
		t.Fatal("wrong preamble accepted")
	}
	nc, err = lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Accept(nc, nil, testPreamble, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Receive(); err == nil {
		t.Fatal("oversized frame received")
	}
}

// TestPreambleMatcher: the matcher decides on exactly the preamble's bytes, without waiting for more.
func TestPreambleMatcher(t *testing.T) {
	t.Parallel()
	match := PreambleMatcher(testPreamble)
	tests := []struct {
		name string
		sent string
		want bool
	}{
		{"the preamble alone", testPreamble, true},
		{"the preamble and a frame", testPreamble + "\x00\x00\x00\x01x", true},
		{"another protocol", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false},
		{"too short", testPreamble[:3], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := match(strings.NewReader(tt.sent)); got != tt.want {
				t.Fatalf("matched %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWrittenBuffersAreReused: once a write is done, the buffer small frames were copied into is reused, so a
// steady stream of small frames allocates nothing per frame.
func TestWrittenBuffersAreReused(t *testing.T) {
	client, server := pair(t)
	received := make(chan error, 1)
	ready := make(chan struct{})
	const frames = 1000
	go func() {
		// The first frame through Receive; the rest read raw into one buffer, so that the receiver allocates
		// nothing while the sender's allocations are counted (AllocsPerRun counts the whole process's).
		got, err := server.Receive()
		if err == nil && len(got) != 300 {
			err = fmt.Errorf("first frame: %d bytes, want 300", len(got))
		}
		close(ready)
		if err != nil {
			received <- err
			return
		}
		buf := make([]byte, 64<<10)
		for want, total := frames*(4+300), 0; total < want; {
			n, err := server.reader.Read(buf)
			if err != nil {
				received <- fmt.Errorf("after %d of %d bytes: %w", total, want, err)
				return
			}
			total += n
		}
		received <- nil
	}()
	body := bytes.Repeat([]byte{7}, 300)
	if err := client.Send(nil, body); err != nil { // the first write makes the buffer
		t.Fatal(err)
	}
	<-ready
	allocs := testing.AllocsPerRun(frames-1, func() {
		if err := client.Send(nil, body[:100], body[100:]); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-received; err != nil {
		t.Fatal(err)
	}
	if allocs > 0 {
		t.Errorf("%.1f allocations per small frame, want 0 (the written buffer reused)", allocs)
	}
}

// TestReceiveBorrowed: frames of every size around the read buffer's and the kept buffer's, mixed with frames
// read by Receive, arrive whole and in order; a borrowed frame is intact until the next receive.
func TestReceiveBorrowed(t *testing.T) {
	client, server := pair(t)
	sizes := []int{0, 1, 300, server.reader.Size() - 1, server.reader.Size(), server.reader.Size() + 1, 100 << 10,
		300, keptFrameSize, keptFrameSize + 1, 10, 2 << 20, 5}
	go func() {
		for i, size := range sizes {
			if err := client.Send(nil, bytes.Repeat([]byte{byte(i + 1)}, size)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i, size := range sizes {
		receive := server.ReceiveBorrowed
		if i%4 == 3 {
			receive = server.Receive
		}
		got, err := receive()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if want := bytes.Repeat([]byte{byte(i + 1)}, size); !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %d bytes, want %d bytes of %d", i, len(got), size, i+1)
		}
	}
}

// TestReceiveBorrowedAllocatesNothing: a steady stream of frames, small ones read in place and larger ones into
// the kept buffer, costs no allocation per frame (AllocsPerRun counts the whole process: the sender's too).
func TestReceiveBorrowedAllocatesNothing(t *testing.T) {
	for _, size := range []int{300, 200 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			client, server := pair(t)
			const frames = 100
			body := make([]byte, size)
			sent := make(chan error, 1)
			go func() {
				for range frames {
					if err := client.Send(nil, body); err != nil {
						sent <- err
						return
					}
				}
				sent <- nil
			}()
			if _, err := server.ReceiveBorrowed(); err != nil { // the first frame may size the kept buffer
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(frames-2, func() {
				if got, err := server.ReceiveBorrowed(); err != nil || len(got) != size {
					t.Fatalf("got %d bytes, %v; want %d", len(got), err, size)
				}
			})
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if allocs > 0 {
				t.Errorf("%.1f allocations per frame, want 0", allocs)
			}
		})
	}
}

package framed

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

// BenchmarkSend measures one-way frames on loopback, 64 senders sharing a connection, in plain text and over
// mutual TLS: small frames (64 bytes, copied into one buffer per write) and frames with a 16 KiB part (written
// in place, so a write carries several buffers, as raft appends and committed entries do).
// It reports the CPU time per frame of both ends (cpu-ns/op), which a loaded machine disturbs less than the
// wall time. go test -run '^$' -bench Send -benchtime 20000x ./internal/framed/
func BenchmarkSend(b *testing.B) {
	certs := certtest.Write(b)
	secure, err := tlsconfig.NewLink(tlsconfig.KindInternal, tlsconfig.Files{CertFile: certs.ServerCert,
		KeyFile: certs.ServerKey, TrustedCAFile: certs.CA}, tlsconfig.Policy{}, tlsconfig.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	for _, transport := range []struct {
		name string
		link *tlsconfig.Link
	}{{"plain", nil}, {"tls", secure}} {
		for _, size := range []struct {
			name  string
			parts [][]byte
		}{
			{"64B", [][]byte{make([]byte, 64)}},
			{"16KiB", [][]byte{make([]byte, 32), make([]byte, 16<<10)}},
		} {
			b.Run(transport.name+"/"+size.name, func(b *testing.B) { benchmarkSend(b, transport.link, size.parts) })
		}
	}
}

func benchmarkSend(b *testing.B, secure *tlsconfig.Link, parts [][]byte) {
	const preamble, senders = "BENCH/1", 64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	lis = secure.Listener(lis, "bench")
	received := make(chan int, 1)
	go func() {
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		conn, err := Accept(nc, nil, preamble, 5*time.Second)
		if err != nil {
			return
		}
		defer conn.Close()
		_ = nc.SetReadDeadline(time.Time{})
		n := 0
		for {
			if _, err := conn.Receive(); err != nil {
				received <- n
				return
			}
			n++
		}
	}()
	conn, err := Dial(lis.Addr().String(), preamble, 5*time.Second, secure)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(parts[0]) + len(parts[len(parts)-1])))
	b.ReportAllocs()
	b.ResetTimer()
	cpuBefore := cpuTime(b)
	var wg sync.WaitGroup
	for i := range senders {
		n := b.N / senders
		if i == 0 {
			n += b.N % senders
		}
		wg.Go(func() {
			for range n {
				if err := conn.SendBatched(nil, parts...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	conn.CloseWrite(5 * time.Second)
	if n := <-received; n != b.N {
		b.Fatalf("received %d frames of %d", n, b.N)
	}
	// CPU per frame (both ends; user and system), steadier than wall time on a shared machine.
	b.ReportMetric(float64(cpuTime(b)-cpuBefore)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time this process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		b.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// BenchmarkReceive compares Receive (a new buffer per frame) with ReceiveBorrowed (the read buffer, or one kept
// buffer, reused) on one sender's stream of frames: a raft append or a proposal (300 B), a batch of them (16 KiB)
// and a large batch (128 KiB, over the read buffer). B/op and allocs/op count both ends.
// go test -run '^$' -bench Receive -benchmem ./internal/framed/
func BenchmarkReceive(b *testing.B) {
	for _, size := range []int{300, 16 << 10, 128 << 10} {
		for _, borrowed := range []bool{false, true} {
			name := fmt.Sprintf("%dB/owned", size)
			if borrowed {
				name = fmt.Sprintf("%dB/borrowed", size)
			}
			b.Run(name, func(b *testing.B) { benchmarkReceive(b, size, borrowed) })
		}
	}
}

func benchmarkReceive(b *testing.B, size int, borrowed bool) {
	client, server := pair(b)
	receive := server.Receive
	if borrowed {
		receive = server.ReceiveBorrowed
	}
	body := make([]byte, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent := make(chan error, 1)
	go func() {
		for range b.N {
			if err := client.SendBatched(nil, body); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for range b.N {
		if frame, err := receive(); err != nil || len(frame) != size {
			b.Fatalf("received %d bytes, %v; want %d", len(frame), err, size)
		}
	}
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
}

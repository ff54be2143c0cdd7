package framed

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
)

// acceptTimeout bounds the wait for a new link's preamble.
const acceptTimeout = 5 * time.Second

// Port serves one listener for a gRPC server and framed links side by side: a connection that opens with one of
// the links' preambles is that link's, every other is the gRPC server's (split by cmux, as the frontend splits
// gRPC from HTTP). Cairn's hot internal hops are links; everything else stays gRPC.
type Port struct {
	lis    net.Listener
	links  sync.WaitGroup
	logger *slog.Logger
}

// Serve starts serving lis: the connections of each preamble of links go, accepted as Conns, to its function
// (one goroutine per connection; the Conn is closed when the function returns), the rest to s. It returns at once.
func Serve(lis net.Listener, s *grpc.Server, links map[string]func(*Conn), logger *slog.Logger) *Port {
	p := &Port{lis: lis, logger: logger}
	m := cmux.New(lis)
	for preamble, serve := range links { // every Match before the catch-all and before Serve
		lis := m.Match(PreambleMatcher(preamble))
		p.links.Add(1) // the accept loop counts too, so a connection's Add never races with Wait
		go func() {
			defer p.links.Done()
			p.accept(lis, preamble, serve)
		}()
	}
	grpcListener := m.Match(cmux.Any())
	go func() {
		if err := s.Serve(grpcListener); err != nil && !errors.Is(err, grpc.ErrServerStopped) &&
			!errors.Is(err, cmux.ErrListenerClosed) && !errors.Is(err, cmux.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			logger.Error("gRPC server stopped", "addr", lis.Addr().String(), "err", err)
		}
	}()
	go func() { _ = m.Serve() }()
	return p
}

// Addr is the listener's address.
func (p *Port) Addr() net.Addr { return p.lis.Addr() }

// Close closes the listener: new connections are refused at once (cmux then closes what it holds). Links already
// served go on until their functions return.
func (p *Port) Close() error { return p.lis.Close() }

// Wait returns once every link's function has returned and the accept loops have ended (after Close).
func (p *Port) Wait() { p.links.Wait() }

func (p *Port) accept(lis net.Listener, preamble string, serve func(*Conn)) {
	for {
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		p.links.Add(1)
		go func() {
			defer p.links.Done()
			var raw net.Conn
			if mc, ok := nc.(*cmux.MuxConn); ok {
				raw = mc.Conn // written to directly; reads go through cmux, which replays the preamble
			}
			conn, err := Accept(nc, raw, preamble, acceptTimeout)
			if err != nil {
				p.logger.Warn("link refused", "err", err)
				return
			}
			defer conn.Close()
			serve(conn)
		}()
	}
}

package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/rpctune"
)

// backend is one watchhub or leasekeeper connection.
type backend struct {
	url  string
	conn *grpc.ClientConn
}

// dialBackends connects (lazily, kept warm) to every URL; a URL's connection spreads its calls over every
// address the URL's host resolves to (resolve.go).
func dialBackends(urls []string, opts []grpc.DialOption) ([]*backend, error) {
	var out []*backend
	for _, u := range urls {
		target, err := config.HostPort(u)
		if err != nil {
			closeBackends(out)
			return nil, err
		}
		dialOpts := append([]grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31 - 1))},
			backendDialOptions()...)
		conn, err := grpc.NewClient(hostScheme+":///"+target, append(dialOpts, append(rpctune.DialOptions(), opts...)...)...)
		if err != nil {
			closeBackends(out)
			return nil, fmt.Errorf("dial %s: %w", u, err)
		}
		conn.Connect()
		out = append(out, &backend{url: "http://" + target, conn: conn})
	}
	return out, nil
}

func closeBackends(backends []*backend) {
	for _, b := range backends {
		_ = b.conn.Close()
	}
}

// rotation hands out backends round robin, skipping those whose connection is failing while others are not.
type rotation struct {
	backends []*backend
	next     atomic.Uint32
}

// order returns every backend once, starting at the next in turn, connected ones first.
func (r *rotation) order() []*backend {
	n := len(r.backends)
	start := int(r.next.Add(1))
	out := make([]*backend, 0, n)
	var failing []*backend
	for i := range n {
		b := r.backends[(start+i)%n]
		if s := b.conn.GetState(); s == connectivity.TransientFailure || s == connectivity.Shutdown {
			failing = append(failing, b)
			continue
		}
		out = append(out, b)
	}
	return append(out, failing...)
}

// forwardedContext carries the client's own metadata (e.g. client/v3's "hasleader") to the backend; gRPC's and
// the tracing headers are set anew by the outgoing call, and a client cannot ask for the relay's trace carriers.
func forwardedContext(ctx context.Context) context.Context {
	in, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	out := metadata.MD{}
	for k, v := range in {
		switch {
		case strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"), k == "content-type", k == "user-agent",
			k == "te", k == "traceparent", k == "tracestate", k == "baggage", k == obs.RelayTraceHeader:
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// errBackendLost ends a proxied stream whose backend failed, so etcd clients open a new stream (client/v3
// resumes watches from their next revision and keep-alives on the next attempt).
func errBackendLost(what string, err error) error {
	return status.Errorf(codes.Unavailable, "cairn frontend: %s backend lost: %v", what, status.Convert(err).Message())
}

// proxyStream relays one client stream to one backend stream until either ends. newReq and newResp make
// the messages read from each side (wiremsg.Raw messages relay frames without decoding them). The client's
// half-close is passed on and responses keep flowing until the backend ends; a backend failure ends the
// client stream with codes.Unavailable, a backend's own status error is passed on unchanged. relay, when not
// nil, relays each response: it calls send with what to send the client (the response, changed or not, or
// each message a batch of them carries) and returns send's error; nil sends every response as it is. screen,
// when not nil, sees every request first: an error ends the stream with it once the backend has answered the
// requests relayed before (etcd answers a stream's requests in order); a reply is sent to the client instead
// of relaying the request.
func proxyStream(what string, client grpc.ServerStream, upstream grpc.ClientStream, newReq, newResp func() any,
	relay func(resp any, send func(any) error) error, screen func(any) (any, error)) error {
	upErr := make(chan error, 2)
	// refused is screen's error, sent before the backend is half-closed, so before the backend's io.EOF.
	refused := make(chan error, 1)
	var sendMu sync.Mutex // the client stream's sends: relayed responses and screen's replies
	go func() {
		for {
			req := newReq()
			err := client.RecvMsg(req)
			if errors.Is(err, io.EOF) {
				_ = upstream.CloseSend()
				return
			}
			if err != nil {
				return // the client is gone; its context cancels the upstream
			}
			if screen != nil {
				reply, err := screen(req)
				if err != nil {
					refused <- err
					_ = upstream.CloseSend() // the backend answers what it was sent, then ends
					return
				}
				if reply != nil {
					sendMu.Lock()
					err = client.SendMsg(reply)
					sendMu.Unlock()
					if err != nil {
						return
					}
					continue
				}
			}
			if err := upstream.SendMsg(req); err != nil {
				return // the upstream's Recv reports why
			}
		}
	}()
	go func() {
		for {
			resp := newResp()
			if err := upstream.RecvMsg(resp); err != nil {
				upErr <- err
				return
			}
			sendMu.Lock()
			var err error
			if relay != nil {
				err = relay(resp, client.SendMsg)
			} else {
				err = client.SendMsg(resp)
			}
			sendMu.Unlock()
			if err != nil {
				upErr <- err
				return
			}
		}
	}()
	err := <-upErr
	switch {
	case errors.Is(err, io.EOF):
		select {
		case err := <-refused:
			return err
		default:
			return nil
		}
	case client.Context().Err() != nil:
		return status.FromContextError(client.Context().Err()).Err()
	case status.Code(err) == codes.Unavailable, status.Code(err) == codes.Canceled, status.Code(err) == codes.Unknown:
		return errBackendLost(what, err)
	}
	return err
}

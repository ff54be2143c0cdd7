package consensusclient

import (
	"context"
	"encoding/binary"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// dialTimeout bounds the opening of a link.
const dialTimeout = time.Second

// dialStream opens a framed stream (the committed link) to target; a failed dial sent nothing.
func dialStream(target, preamble string, secure *tlsconfig.Link) (*framed.Conn, error) {
	conn, err := framed.Dial(target, preamble, dialTimeout, secure)
	if err != nil {
		return nil, link.NotSent(status.Errorf(codes.Unavailable, "consensusclient: dial %s: %v", target, err))
	}
	return conn, nil
}

// newProposeLink returns the propose link to target (internal/link): proposals and read index calls go out from
// the caller's own goroutine, sharing a write when several are in flight; the link opens on first use and again
// after it breaks.
func newProposeLink(target string, tel *obs.Telemetry, secure *tlsconfig.Link) *link.Client {
	return link.NewClient(link.ClientConfig{
		Addr: target, Preamble: consensuspb.ProposePreamble, DialTimeout: dialTimeout, TLS: secure,
		Telemetry: tel, Name: "consensus.propose", MethodNames: consensuspb.ProposeMethodNames,
	})
}

// propose sends data as a proposal and waits for its acknowledgement. A call whose context ended returns the
// context's error, as the proposer expects of commitlog.Log.
func propose(ctx context.Context, l *link.Client, data []byte) error {
	_, err := l.Call(ctx, consensuspb.ProposeMethod, data)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// proposeThen is propose that does not wait: done gets what propose would have returned, from the link's
// receiving goroutine (or this one when the call was not sent).
func proposeThen(ctx context.Context, l *link.Client, data []byte, done func(error)) {
	l.Go(ctx, consensuspb.ProposeMethod, data, func(_ []byte, err error) {
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		done(err)
	})
}

// readIndex asks for a read index and waits for it.
func readIndex(ctx context.Context, l *link.Client) (uint64, error) {
	answer, err := l.Call(ctx, consensuspb.ReadIndexMethod, nil)
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, err
	}
	index, n := binary.Uvarint(answer)
	if n <= 0 {
		return 0, status.Error(codes.Internal, "consensusclient: read index answer not decodable")
	}
	return index, nil
}

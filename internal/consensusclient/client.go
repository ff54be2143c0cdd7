package consensusclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Membership is etcd's Cluster service plus Maintenance.MoveLeader as consensus serves them, with etcd's
// messages and errors. *Client implements it, and so does *consensus.Node for in-process use.
type Membership interface {
	MemberList(ctx context.Context, req *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error)
	MemberAdd(ctx context.Context, req *etcdserverpb.MemberAddRequest) (*etcdserverpb.MemberAddResponse, error)
	MemberRemove(ctx context.Context, req *etcdserverpb.MemberRemoveRequest) (*etcdserverpb.MemberRemoveResponse, error)
	MemberUpdate(ctx context.Context, req *etcdserverpb.MemberUpdateRequest) (*etcdserverpb.MemberUpdateResponse, error)
	MemberPromote(ctx context.Context, req *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error)
	MoveLeader(ctx context.Context, req *etcdserverpb.MoveLeaderRequest) (*etcdserverpb.MoveLeaderResponse, error)
}

// Config configures a Client.
type Config struct {
	// Target is the member's Consensus API URL (http://host:port) or host:port.
	Target string
	// DialOptions are added to the connection (for example Telemetry.DialOptions()).
	DialOptions []grpc.DialOption
	// Telemetry carries the proposer's trace context into proposals; nil means none.
	Telemetry *obs.Telemetry
	// MaxInflight bounds unacknowledged proposals; 0 means 4096.
	MaxInflight int
	// Logger receives notices about reconnects; nil discards them.
	Logger *slog.Logger
	// TLS secures the gRPC connection and the framed propose and committed links (the member serves its
	// consensus port with the same internal link); nil: plain.
	TLS *tlsconfig.Link
}

// Client talks to one consensus member.
type Client struct {
	cfg      Config
	target   string // host:port
	conn     *grpc.ClientConn
	api      consensuspb.ConsensusClient
	inflight chan struct{}

	propose *link.Client
}

var (
	_ commitlog.Log = (*Client)(nil)
	_ Membership    = (*Client)(nil)
)

// New returns a client of cfg.Target; it connects on first use.
func New(cfg Config) (*Client, error) {
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 4096
	}
	if cfg.Telemetry == nil {
		cfg.Telemetry = obs.NoTelemetry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	target := cfg.Target
	if i := strings.Index(target, "://"); i >= 0 {
		target = target[i+3:]
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(cfg.TLS.GRPC()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}, append(rpctune.DialOptions(), cfg.DialOptions...)...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("consensusclient: dial %s: %w", cfg.Target, err)
	}
	return &Client{
		cfg: cfg, target: target, conn: conn, api: consensuspb.NewConsensusClient(conn),
		inflight: make(chan struct{}, cfg.MaxInflight), propose: newProposeLink(target, cfg.Telemetry, cfg.TLS),
	}, nil
}

// Close ends the propose link and the connection; calls in flight fail.
func (c *Client) Close() error {
	c.propose.Close()
	return c.conn.Close()
}

// Propose implements commitlog.Log.
func (c *Client) Propose(ctx context.Context, data []byte) error {
	select {
	case c.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.inflight }()
	return propose(ctx, c.propose, data)
}

// Committed implements commitlog.Log, resuming after broken connections.
func (c *Client) Committed(ctx context.Context, fromIndex uint64, deliver func([]commitlog.Entry) error) error {
	next := max(fromIndex, 1)
	wait := 10 * time.Millisecond
	for {
		delivered, err := c.committedOnce(ctx, &next, deliver)
		var fromDeliver errDeliver
		switch {
		case errors.As(err, &fromDeliver):
			return fromDeliver.err
		case ctx.Err() != nil:
			return ctx.Err()
		case status.Code(err) != codes.Unavailable:
			return err
		}
		if delivered {
			wait = 10 * time.Millisecond
		}
		c.cfg.Logger.Debug("committed stream broke; resuming", "next-index", next, "err", err, "retry-in", wait)
		select {
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, time.Second)
	}
}

// errDeliver marks an error returned by the caller's deliver, which ends Committed as is.
type errDeliver struct{ err error }

func (e errDeliver) Error() string { return e.err.Error() }

// committedOnce follows one committed link from *next until it ends.
func (c *Client) committedOnce(ctx context.Context, next *uint64, deliver func([]commitlog.Entry) error) (bool, error) {
	conn, err := dialStream(c.target, consensuspb.CommittedPreamble, c.cfg.TLS)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	request, err := proto.Marshal(&consensuspb.CommittedRequest{FromIndex: *next})
	if err == nil {
		err = conn.Send(nil, request)
	}
	if err != nil {
		return false, status.Errorf(codes.Unavailable, "consensusclient: committed link: %v", err)
	}
	delivered := false
	var batch []commitlog.Entry
	for {
		frame, err := conn.ReceiveBorrowed() // reused for the next frame: Unmarshal copies the entries' data
		if err != nil {
			return delivered, status.Errorf(codes.Unavailable, "consensusclient: committed link broke: %v", err)
		}
		resp := &consensuspb.CommittedResponse{}
		if err := proto.Unmarshal(frame, resp); err != nil {
			return delivered, status.Errorf(codes.Unavailable, "consensusclient: committed link: %v", err)
		}
		if e := resp.GetError(); e != nil {
			return delivered, status.ErrorProto(e)
		}
		batch = batch[:0]
		for _, e := range resp.GetEntries() {
			batch = append(batch, EntryFromProto(e))
		}
		if len(batch) == 0 {
			continue
		}
		if err := deliver(batch); err != nil {
			return delivered, deliverError(err)
		}
		delivered = true
		*next = batch[len(batch)-1].Index + 1
	}
}

// deliverError wraps the caller's error so a codes.Unavailable from deliver is not mistaken for a broken
// connection.
func deliverError(err error) error {
	if status.Code(err) == codes.Unavailable {
		return errDeliver{err: err}
	}
	return err
}

// ReadIndex implements commitlog.Log, on the propose link.
func (c *Client) ReadIndex(ctx context.Context) (uint64, error) {
	return readIndex(ctx, c.propose)
}

// Compact implements commitlog.Log.
func (c *Client) Compact(ctx context.Context, appliedIndex uint64) error {
	_, err := c.api.Compact(ctx, &consensuspb.CompactRequest{AppliedIndex: appliedIndex})
	return err
}

// Status implements commitlog.Log.
func (c *Client) Status(ctx context.Context) (commitlog.Status, error) {
	resp, err := c.api.Status(ctx, &consensuspb.StatusRequest{})
	if err != nil {
		return commitlog.Status{}, err
	}
	return StatusFromProto(resp), nil
}

// MemberList implements Membership.
func (c *Client) MemberList(ctx context.Context, req *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error) {
	return c.api.MemberList(ctx, req)
}

// MemberAdd implements Membership.
func (c *Client) MemberAdd(ctx context.Context, req *etcdserverpb.MemberAddRequest) (*etcdserverpb.MemberAddResponse, error) {
	return c.api.MemberAdd(ctx, req)
}

// MemberRemove implements Membership.
func (c *Client) MemberRemove(ctx context.Context, req *etcdserverpb.MemberRemoveRequest) (*etcdserverpb.MemberRemoveResponse, error) {
	return c.api.MemberRemove(ctx, req)
}

// MemberUpdate implements Membership.
func (c *Client) MemberUpdate(ctx context.Context, req *etcdserverpb.MemberUpdateRequest) (*etcdserverpb.MemberUpdateResponse, error) {
	return c.api.MemberUpdate(ctx, req)
}

// MemberPromote implements Membership.
func (c *Client) MemberPromote(ctx context.Context, req *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error) {
	return c.api.MemberPromote(ctx, req)
}

// MoveLeader implements Membership.
func (c *Client) MoveLeader(ctx context.Context, req *etcdserverpb.MoveLeaderRequest) (*etcdserverpb.MoveLeaderResponse, error) {
	return c.api.MoveLeader(ctx, req)
}

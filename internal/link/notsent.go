package link

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// ErrNotSent marks an error of a call that certainly did not reach the server's handler, so it may be sent
// again, to the same server or another, without being carried out twice. Test for it with errors.Is.
var ErrNotSent = errors.New("link: call not sent")

// Marker of a not-sent status carried as a detail across a link's answer or a gRPC call.
const (
	notSentDomain = "cairn-kv.io/link"
	notSentReason = "NOT_SENT"
)

// notSent is an error marked as not sent. It keeps the gRPC status of the error it marks (message unchanged),
// with a detail saying it was not sent, so the mark survives a gRPC answer or a link's error answer.
type notSent struct{ err error }

// NotSent marks err (a gRPC status error, or any error: it answers as gRPC would convert it) as the error of a
// call that was not sent or not started; nil stays nil.
func NotSent(err error) error {
	if err == nil || errors.Is(err, ErrNotSent) {
		return err
	}
	return &notSent{err: err}
}

func (e *notSent) Error() string   { return e.err.Error() }
func (e *notSent) Unwrap() []error { return []error{ErrNotSent, e.err} }

// GRPCStatus is the marked error's status with the not-sent detail added.
func (e *notSent) GRPCStatus() *status.Status {
	st := status.Convert(e.err)
	if hasNotSentDetail(st) {
		return st
	}
	withDetail, err := st.WithDetails(&errdetails.ErrorInfo{Domain: notSentDomain, Reason: notSentReason})
	if err != nil {
		return st
	}
	return withDetail
}

// FromStatus is the error of st, marked as not sent when st carries the not-sent detail; nil for OK.
func FromStatus(st *status.Status) error {
	if st == nil || st.Err() == nil {
		return nil
	}
	if hasNotSentDetail(st) {
		return &notSent{err: st.Err()}
	}
	return st.Err()
}

// Plain is err as a gRPC status error without the not-sent detail: what a caller outside Cairn (an etcd
// client) gets, so the mark stays inside.
func Plain(err error) error {
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrNotSent) {
		st, ok := status.FromError(err)
		if !ok || !hasNotSentDetail(st) {
			return err
		}
	}
	st := status.Convert(err)
	return status.Error(st.Code(), st.Message())
}

// PlainServerOptions are the gRPC server options of a server that answers callers outside Cairn (the
// frontend's etcd API): every error it returns, from a unary call or a stream, leaves without the not-sent
// mark, whichever path produced it.
func PlainServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			resp, err := handler(ctx, req)
			return resp, Plain(err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return Plain(handler(srv, ss))
		}),
	}
}

func hasNotSentDetail(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == notSentDomain && info.Reason == notSentReason {
			return true
		}
	}
	return false
}

// sentFlag is set, through a call's context, once gRPC has queued the call's headers on a connection: from
// then on the call may reach the server.
type sentFlag struct{ sent atomic.Bool }

type sentKey struct{}

// GRPCDialOptions mark the errors of a gRPC client connection's unary calls: a call that failed before gRPC
// queued its headers on a connection (no connection, a failed dial) was not sent, and an answer carrying the
// not-sent detail (storage's health refusal) is marked too. Both are decided from gRPC's own events (a stats
// handler's OutHeader), never from an error's text.
func GRPCDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStatsHandler(sentTracker{}),
		grpc.WithChainUnaryInterceptor(unaryClientInterceptor),
	}
}

func unaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	flag := &sentFlag{}
	err := invoker(context.WithValue(ctx, sentKey{}, flag), method, req, reply, cc, opts...)
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if ok && hasNotSentDetail(st) {
		return &notSent{err: err}
	}
	if !flag.sent.Load() {
		return &notSent{err: err}
	}
	return err
}

// sentTracker is the stats handler that sets a call's sentFlag.
type sentTracker struct{}

func (sentTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutHeader); !ok {
		return
	}
	if flag, ok := ctx.Value(sentKey{}).(*sentFlag); ok {
		flag.sent.Store(true)
	}
}

func (sentTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (sentTracker) HandleConn(context.Context, stats.ConnStats)                       {}

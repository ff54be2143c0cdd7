// Package rpctune holds the gRPC transport settings every Cairn server and internal client shares.
//
// Cairn's hops are loopback or LAN links with sub-millisecond round trips, where gRPC's defaults cost more
// than they give: a 64 KiB starting window grown by BDP-probing pings, and a new goroutine per stream whose
// stack is grown (copied) again on every request. The settings here fix both: 1 MiB flow-control windows
// from the start (no BDP pings), and, on the client port only, a pool of stream workers that keep their grown
// stacks between requests. The internal servers do without the pool: their hot paths are framed links, their
// gRPC streams are few or long-lived (Watch, LeaseKeepAlive), and 512 parked workers cost every such server
// about 5 MiB of stacks at idle (a consensus member has two servers).
package rpctune

import (
	"google.golang.org/grpc"
)

// Window is the fixed per-stream and per-connection flow-control window.
const Window = 1 << 20

// StreamWorkers is how many goroutines the client-port server keeps for running handlers; gRPC starts a fresh
// goroutine for a stream when all are busy, so this bounds nothing. Every kept worker holds the stack its
// deepest call grew (about 16 KiB serving a Put) until a collection finds it idle and shrinks it, and gRPC
// hands streams to the parked workers in turn, so under etcd's benchmark (1000 clients, ~330 streams at once
// per frontend) all of them grew: 512 kept 8 MiB of stacks per frontend. 128 keep the pool for the
// concurrency most clients bring; a burst above it runs on fresh goroutines, which the runtime starts at the
// average stack size it saw (Go's adaptive initial stacks), so they seldom grow.
const StreamWorkers = 128

// ClientReadBuffer and ClientWriteBuffer are the client port's per-connection HTTP/2 read and write buffer
// sizes (gRPC's are 32 KiB each). The client port's connections come through cmux, whose connection type keeps
// gRPC from reading into a pooled buffer only while data waits, so each connection holds its read buffer for
// its life; the write buffer is pooled, but a busy connection's writer keeps it while it waits for more frames
// to batch. Under etcd's benchmark (100 connections over 3 frontends) the two took 2 MiB of a frontend's 7 MiB
// live heap, and a memory-limited process's heap room shrinks by what it holds live. A read takes what has
// arrived, a few hundred bytes a request, and a frame longer than the buffer is read straight into the frame
// (bufio passes long reads through), so 8 KiB costs no more reads; 16 KiB still writes a whole data frame (16
// KiB at most) at once.
const (
	ClientReadBuffer  = 8 << 10
	ClientWriteBuffer = 16 << 10
)

// ServerOptions are the transport settings of every internal Cairn gRPC server (a goroutine per stream, as
// gRPC does by default).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(Window),
		grpc.InitialConnWindowSize(Window),
	}
}

// ClientServerOptions are the transport settings of the server on the client port, which takes many short
// calls from etcd clients on many connections: ServerOptions, a pool of StreamWorkers and smaller connection
// buffers (ClientReadBuffer, ClientWriteBuffer).
func ClientServerOptions() []grpc.ServerOption {
	return append(ServerOptions(), grpc.NumStreamWorkers(StreamWorkers),
		grpc.ReadBufferSize(ClientReadBuffer), grpc.WriteBufferSize(ClientWriteBuffer))
}

// DialOptions are the transport settings of every Cairn gRPC client connection to another Cairn service.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(Window),
		grpc.WithInitialConnWindowSize(Window),
	}
}

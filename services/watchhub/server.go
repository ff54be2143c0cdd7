package watchhub

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// watchServer is the etcd Watch service of one hub.
type watchServer struct {
	pb.UnimplementedWatchServer
	hub *Hub
}

// errHubStopping ends the streams of a hub that stops; clients resume on another hub.
var errHubStopping = status.Error(codes.Unavailable, "cairn watchhub stopping")

// Watch serves one bidirectional stream as etcd's watch server does: requests are read until the client
// closes its side, responses are written until the stream ends.
func (ws *watchServer) Watch(srv pb.Watch_WatchServer) error {
	h := ws.hub
	var leaderLost <-chan struct{}
	if requiresLeader(srv.Context()) {
		if h.hasNoLeader() {
			return rpctypes.ErrGRPCNoLeader
		}
		leaderLost = h.leaderLost()
	}
	s := newStream(h, srv)
	s.useRelayBatches()
	if !h.addStream(s) {
		return errHubStopping
	}
	h.senders.Add(1)
	go s.sendLoop()
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.recvLoop() }()
	var err error
	select {
	case err = <-recvErr:
		if err == nil { // the client closed its side: keep sending until it goes away, as etcd does
			select {
			case <-srv.Context().Done():
				err = srv.Context().Err()
			case <-h.stopping:
				err = errHubStopping
			}
		}
	case <-srv.Context().Done():
		err = srv.Context().Err()
	case <-h.stopping:
		err = errHubStopping
	case <-leaderLost:
		err = rpctypes.ErrGRPCNoLeader
	}
	s.end()
	if errors.Is(err, context.Canceled) {
		err = rpctypes.ErrGRPCWatchCanceled
	}
	return err
}

// requiresLeader reports whether the client asked, as client/v3's WithRequireLeader does, that the stream
// fail when the cluster has no leader.
func requiresLeader(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	ks := md[rpctypes.MetadataRequireLeaderKey]
	return len(ks) > 0 && ks[0] == rpctypes.MetadataHasLeader
}

// addStream registers a new stream unless the hub is stopping.
func (h *Hub) addStream(s *stream) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stopping:
		return false
	default:
	}
	h.streams[s] = struct{}{}
	h.metrics.streams.Set(float64(len(h.streams)))
	h.streamsChanged()
	return true
}

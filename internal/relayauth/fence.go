package relayauth

import (
	"context"
	"encoding/binary"

	"google.golang.org/grpc/metadata"
)

// FenceMetadataKey is the gRPC metadata key (binary) a frontend's relayed lease grant or revoke carries its
// auth fence in.
const FenceMetadataKey = "cairn-auth-fence-bin"

// Fence is what a frontend checked a relayed write against, for the keeper to copy into the header of the entry
// it proposes (etcdserverpb.RequestHeader's Username and AuthRevision), so storage refuses the entry with
// ErrAuthOldRevision if the auth store changed since (storage's authRefusal): the caller's user and the auth
// revision of the frontend's copy of the store, or, for an anonymous caller let through by a copy saying
// authentication is disabled, no user and that copy's read fence (never 0).
type Fence struct {
	User     string
	Revision uint64
}

// WithFence returns ctx whose outgoing metadata carries fence, replacing any fence already there (a client's
// own metadata never speaks for the frontend).
func WithFence(ctx context.Context, fence Fence) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	encoded := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(fence.User)), fence.Revision)
	md.Set(FenceMetadataKey, string(append(encoded, fence.User...)))
	return metadata.NewOutgoingContext(ctx, md)
}

// FenceFrom returns the fence ctx's incoming call carries; ok is false when it carries none (a call that is not
// a frontend's relayed write) or a malformed one. It is to be believed only from a frontend: while
// authentication is enabled a Guard lets no one else call, and with it disabled a fence can only make the
// caller's own write refused.
func FenceFrom(ctx context.Context) (fence Fence, ok bool) {
	values := metadata.ValueFromIncomingContext(ctx, FenceMetadataKey)
	if len(values) != 1 || len(values[0]) < 8 {
		return Fence{}, false
	}
	revision := binary.BigEndian.Uint64([]byte(values[0][:8]))
	if revision == 0 {
		return Fence{}, false
	}
	return Fence{User: values[0][8:], Revision: revision}, true
}

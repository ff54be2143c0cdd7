package relayauth

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestGuardCheck(t *testing.T) {
	withSecret := func(s string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, s))
	}
	for _, tt := range []struct {
		name        string
		secret      string
		internalTLS bool
		authEnabled *bool // nil: never told
		ctx         context.Context
		wantRefused bool
	}{
		{"auth disabled: anyone", "s3cret", false, ptr(false), context.Background(), false},
		{"auth state unknown: waits (until ctx ends)", "s3cret", false, nil, canceled(), true},
		{"direct client", "s3cret", false, ptr(true), context.Background(), true},
		{"wrong secret", "s3cret", false, ptr(true), withSecret("guess"), true},
		{"frontend with the secret", "s3cret", false, ptr(true), withSecret("s3cret"), false},
		{"no secret configured: nobody proves anything", "", false, ptr(true), withSecret(""), true},
		{"internal TLS: every caller verified", "", true, ptr(true), context.Background(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(tt.secret, tt.internalTLS)
			if tt.authEnabled != nil {
				g.SetAuthEnabled(*tt.authEnabled)
			}
			err := g.Check(tt.ctx)
			if tt.authEnabled == nil {
				if status.Code(err) != codes.Canceled {
					t.Fatalf("Check before the auth state is known = %v, want it to wait until canceled", err)
				}
				return
			}
			if refused := errors.Is(err, ErrDirectClient); refused != tt.wantRefused || (err != nil && !refused) {
				t.Fatalf("Check = %v, want refused %v", err, tt.wantRefused)
			}
		})
	}
}

func TestSecretCredentials(t *testing.T) {
	md, err := secretCredentials("s3cret").GetRequestMetadata(context.Background())
	if err != nil || md[MetadataKey] != "s3cret" {
		t.Fatalf("metadata %v, %v", md, err)
	}
	if md, _ := secretCredentials("").GetRequestMetadata(context.Background()); len(md) != 0 {
		t.Fatalf("empty secret sends %v", md)
	}
}

func ptr(b bool) *bool { return &b }

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestFence: a fence set on a relayed call's outgoing metadata reads back on the callee, replacing any fence
// the metadata already had (a client's own never speaks for the frontend); none or a malformed one reads as
// no fence.
func TestFence(t *testing.T) {
	incoming := func(ctx context.Context) context.Context {
		md, _ := metadata.FromOutgoingContext(ctx)
		return metadata.NewIncomingContext(context.Background(), md)
	}
	forged := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(FenceMetadataKey, "\xff\xff\xff\xff\xff\xff\xff\xffroot"))
	for _, tt := range []struct {
		name   string
		ctx    context.Context
		want   Fence
		wantOK bool
	}{
		{"user", incoming(WithFence(context.Background(), Fence{User: "alice", Revision: 7})), Fence{"alice", 7}, true},
		{"anonymous", incoming(WithFence(context.Background(), Fence{Revision: 6})), Fence{Revision: 6}, true},
		{"non-ASCII user", incoming(WithFence(context.Background(), Fence{User: "bjørn", Revision: 9})), Fence{"bjørn", 9}, true},
		{"replaces a forged one", incoming(WithFence(forged, Fence{User: "alice", Revision: 3})), Fence{"alice", 3}, true},
		{"none", context.Background(), Fence{}, false},
		{"too short", metadata.NewIncomingContext(context.Background(), metadata.Pairs(FenceMetadataKey, "abc")), Fence{}, false},
		{"revision 0", incoming(WithFence(context.Background(), Fence{User: "alice"})), Fence{}, false},
		{"two values", metadata.NewIncomingContext(context.Background(), metadata.Pairs(
			FenceMetadataKey, "\x00\x00\x00\x00\x00\x00\x00\x01", FenceMetadataKey, "\x00\x00\x00\x00\x00\x00\x00\x02")), Fence{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FenceFrom(tt.ctx)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("FenceFrom = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestGuardRefresh checks that a guard with a refresh lets a direct caller through on "disabled" only while it
// is fresh, reads the state again otherwise (once for callers that arrive together), and never refreshes for a
// frontend.
func TestGuardRefresh(t *testing.T) {
	withSecret := metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "s3cret"))
	for _, tt := range []struct {
		name         string
		ctx          context.Context
		age          time.Duration // since the state was last set
		storeEnabled bool          // what a refresh reads
		refreshErr   error
		wantRefresh  int
		wantCode     codes.Code
	}{
		{"fresh disabled: through", context.Background(), FreshFor / 2, true, nil, 0, codes.OK},
		{"old disabled, still disabled", context.Background(), FreshFor, false, nil, 1, codes.OK},
		{"old disabled, enabled since", context.Background(), FreshFor, true, nil, 1, codes.PermissionDenied},
		{"old disabled, storage away", context.Background(), FreshFor, false, errors.New("no storage"), 1, codes.Unavailable},
		{"frontend: never refreshes", withSecret, 10 * FreshFor, true, nil, 0, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := NewGuard("s3cret", false)
				refreshes := 0
				g.SetRefresh(func(context.Context) error {
					refreshes++
					if tt.refreshErr != nil {
						return tt.refreshErr
					}
					g.SetAuthEnabled(tt.storeEnabled)
					return nil
				})
				g.SetAuthEnabled(false)
				time.Sleep(tt.age)
				var wg sync.WaitGroup
				for range 3 { // callers arriving together share one refresh
					wg.Go(func() {
						if err := g.Check(tt.ctx); status.Code(err) != tt.wantCode {
							t.Errorf("Check = %v, want code %v", err, tt.wantCode)
						}
					})
				}
				wg.Wait()
				want := tt.wantRefresh
				if tt.refreshErr != nil {
					want = 3 // a failed refresh leaves the state old for the next caller
				}
				if refreshes != want {
					t.Fatalf("%d refreshes, want %d", refreshes, want)
				}
			})
		})
	}
}

package relayauth

import (
	"context"
	"errors"
	"testing"

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

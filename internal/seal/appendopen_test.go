package seal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestAppendOpen: AppendOpen appends exactly OpenedLen(stored) bytes, the value Open returns, after what dst holds,
// into dst's own room when it has enough; plain values (identity) too; and fails as Open fails.
func TestAppendOpen(t *testing.T) {
	k := keyring(t, fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/plain/"]
  providers: [{aesgcm: {keys: [{name: k1, secret: %s}]}}, {identity: {}}]
- prefixes: ["/"]
  providers: [{secretbox: {keys: [{name: k2, secret: %s}]}}]
`, secret(t, 32), secret(t, 32)))
	ctx := context.Background()
	sealedOf := func(key string, value []byte) []byte {
		sealed, err := k.Seal(ctx, []byte(key), value)
		if err != nil {
			t.Fatal(err)
		}
		return sealed
	}
	large := bytes.Repeat([]byte("0123456789"), 10<<10)
	tampered := sealedOf("/s/a", []byte("secret"))
	tampered[len(tampered)-1] ^= 1
	tests := []struct {
		name    string
		key     string
		stored  []byte
		want    []byte
		wantErr error
	}{
		{"sealed", "/s/a", sealedOf("/s/a", []byte("secret")), []byte("secret"), nil},
		{"sealed large", "/s/a", sealedOf("/s/a", large), large, nil},
		{"sealed empty", "/s/a", sealedOf("/s/a", nil), []byte{}, nil},
		{"plain under identity", "/plain/a", []byte("plain"), []byte("plain"), nil},
		{"plain without identity", "/s/a", []byte("plain"), nil, ErrNotSealed},
		{"another key's value", "/s/b", sealedOf("/s/a", []byte("secret")), nil, ErrAuthFailed},
		{"tampered", "/s/a", tampered, nil, ErrAuthFailed},
		{"header cut", "/s/a", []byte(Magic + "aesgcm:k1"), nil, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opened, err := k.Open(ctx, []byte(tt.key), tt.stored)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Open: %v, want %v", err, tt.wantErr)
			}
			n, lenErr := OpenedLen(tt.stored)
			dst := make([]byte, 3, 3+n+8)
			copy(dst, "pre")
			got, err := k.AppendOpen(ctx, dst, []byte(tt.key), tt.stored)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("AppendOpen: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			if lenErr != nil || n != len(tt.want) {
				t.Fatalf("OpenedLen = %d, %v; want %d", n, lenErr, len(tt.want))
			}
			if !bytes.Equal(opened, tt.want) || string(got[:3]) != "pre" || !bytes.Equal(got[3:], tt.want) {
				t.Fatalf("Open %.20q, AppendOpen %.20q; want %.20q after pre", opened, got, tt.want)
			}
			if &got[0] != &dst[0] {
				t.Fatalf("AppendOpen allocated although dst had room for %d bytes", n)
			}
		})
	}
}

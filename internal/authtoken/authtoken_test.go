package authtoken

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func TestSimpleTokens(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p, err := New("simple", 10*time.Second, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	prefix, err := p.Prefix()
	if err != nil || len(prefix) != 16 {
		t.Fatalf("prefix %q, %v; want 16 letters", prefix, err)
	}
	token, _ := p.Assign(prefix, 42, "alice", 7)
	if token != prefix+".42" {
		t.Fatalf("token %q, want %s.42", token, prefix)
	}
	clock.now = clock.now.Add(9 * time.Second)
	if info, ok := p.Info(token); !ok || info != (Info{Username: "alice", Revision: 7}) {
		t.Fatalf("Info after 9s = %v, %v", info, ok)
	}
	clock.now = clock.now.Add(9 * time.Second) // used 9 s ago: still alive, the use renewed it
	if _, ok := p.Info(token); !ok {
		t.Fatal("token expired although used within its TTL")
	}
	clock.now = clock.now.Add(10 * time.Second)
	if _, ok := p.Info(token); ok {
		t.Fatal("token alive after its TTL unused")
	}
	other, _ := p.Assign(prefix, 43, "bob", 7)
	p.InvalidateUser("bob")
	if _, ok := p.Info(other); ok {
		t.Fatal("token of an invalidated user still valid")
	}
	if _, ok := p.Info("forged.1"); ok {
		t.Fatal("unknown token accepted")
	}
}

// TestJWT: a token issued by one provider is read by another with the same keys (another frontend), and by
// a verify-only one; expired, forged and malformed tokens are refused.
func TestJWT(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	priv, pub := certtest.WriteJWTKeys(t)
	issuer, err := New("jwt,pub-key="+pub+",priv-key="+priv+",sign-method=ES256,ttl=1m", 0, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New("jwt,pub-key="+pub+",priv-key="+priv+",sign-method=ES256", 0, clock.Now)
	verifier, err := New("jwt,pub-key="+pub+",sign-method=ES256", 0, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	token, err := issuer.Assign("", 0, "alice", 9)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Provider{"issuer": issuer, "other": other, "verifier": verifier} {
		if info, ok := p.Info(token); !ok || info != (Info{Username: "alice", Revision: 9}) {
			t.Errorf("%s: Info = %v, %v", name, info, ok)
		}
	}
	if _, err := verifier.Assign("", 0, "alice", 9); !errors.Is(err, ErrVerifyOnly) {
		t.Errorf("verify-only Assign = %v, want ErrVerifyOnly", err)
	}
	otherPriv, otherPub := certtest.WriteJWTKeys(t)
	forger, _ := New("jwt,pub-key="+otherPub+",priv-key="+otherPriv+",sign-method=ES256", 0, clock.Now)
	forged, _ := forger.Assign("", 0, "root", 9)
	parts := strings.Split(token, ".")
	for name, bad := range map[string]string{"forged": forged, "malformed": "not.a.jwt", "empty": "",
		"alg none": "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."} {
		if _, ok := issuer.Info(bad); ok {
			t.Errorf("%s token accepted", name)
		}
	}
	clock.now = clock.now.Add(2 * time.Minute)
	if _, ok := issuer.Info(token); ok {
		t.Error("expired token accepted")
	}
	for _, bad := range []string{"jwt,sign-method=ES256", "jwt,pub-key=" + pub + ",sign-method=XX", "jwt,bogus=1", "opaque"} {
		if _, err := New(bad, 0, clock.Now); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%q) = %v, want ErrInvalidOptions", bad, err)
		}
	}
}

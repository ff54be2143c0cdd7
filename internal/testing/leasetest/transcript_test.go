package leasetest

import "testing"

// TestTranscriptNormalizer: transcripts compare whatever digits the IDs happen to have (a 16-digit decimal ID
// in JSON once passed for a new hex ID and failed an e2e comparison).
func TestTranscriptNormalizer(t *testing.T) {
	norm := TranscriptNormalizer()
	for _, tt := range []struct{ in, want string }{
		{"lease 694d9a9e1e4bc30f granted with TTL(30s)", "lease ID1 granted with TTL(30s)"},
		{`"kvs":[{"key":"a","lease":7587893077345731343}]`, `"kvs":[{"key":"a","lease":ID}]`},
		{`"kvs":[{"key":"a","lease":1234567890123456}]`, `"kvs":[{"key":"a","lease":ID}]`},
		{"lease 694d9a9e1e4bc30f remaining(29s) attached keys([b a])", "lease ID1 remaining(N) attached keys([a b])"},
		{"lease 0000000000000abc revoked", "lease ID2 revoked"},
	} {
		if got := norm(tt.in); got != tt.want {
			t.Errorf("normalized %q\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
	if got := TranscriptNormalizer()("lease 0000000000000abc revoked"); got != "lease ID1 revoked" {
		t.Errorf("a new normalizer numbers from ID1, got %q", got)
	}
}

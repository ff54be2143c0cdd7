package waittest

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUntil(t *testing.T) {
	tests := []struct {
		name     string
		holdsAt  int // the poll at which cond first holds; 0 never
		timeout  time.Duration
		wantFail bool
	}{
		{"holds at once", 1, time.Second, false},
		{"holds on the fifth poll", 5, time.Second, false},
		{"never holds", 0, 50 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // time is the subject: a fake clock
				r := &recorder{TB: t}
				polls := 0
				took := Until(r, tt.timeout, time.Millisecond, "the thing", func() bool {
					polls++
					return tt.holdsAt != 0 && polls >= tt.holdsAt
				})
				if tt.wantFail {
					if !strings.Contains(r.failed, "the thing") || took < tt.timeout {
						t.Fatalf("failure %q after %v, want one naming the thing after %v", r.failed, took, tt.timeout)
					}
					return
				}
				if r.failed != "" || polls != tt.holdsAt || took > tt.timeout {
					t.Fatalf("failed %q, %d polls in %v; want %d polls", r.failed, polls, took, tt.holdsAt)
				}
			})
		})
	}
}

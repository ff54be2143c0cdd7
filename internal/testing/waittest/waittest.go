// Package waittest is the one wait-until helper of Cairn's tests: poll a condition until it holds, and fail
// the test when a deadline passes first.
package waittest

import (
	"testing"
	"time"
)

// Until polls cond every interval until it holds and returns how long that took; it fails t with what it
// was waiting for when timeout passes first. Inside a synctest bubble, intervals and timeout are on the bubble's
// fake clock.
func Until(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
			return time.Since(start)
		}
		time.Sleep(interval)
	}
	return time.Since(start)
}

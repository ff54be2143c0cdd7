package frontend

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/resolver"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// recordingConn is the gRPC side of a resolver: it records what the resolver hands over.
type recordingConn struct {
	resolver.ClientConn
	mu     sync.Mutex
	states [][]string
	errs   int
}

func (c *recordingConn) UpdateState(s resolver.State) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var addrs []string
	for _, a := range s.Addresses {
		addrs = append(addrs, a.Addr)
	}
	c.states = append(c.states, addrs)
	return nil
}

func (c *recordingConn) ReportError(error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs++
}

func (c *recordingConn) seen() ([][]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.states), c.errs
}

func TestHostResolverFollowsTheHostsAddresses(t *testing.T) {
	errNoHost := errors.New("no such host")
	type answer struct {
		ips []string
		err error
	}
	tests := []struct {
		name       string
		target     string
		answers    []answer // one per lookup; the last repeats
		wantStates [][]string
		wantErrs   int
	}{
		{"an IP is not looked up", "10.0.0.7:2397", []answer{{err: errNoHost}},
			[][]string{{"10.0.0.7:2397"}}, 0},
		{"scaled from 1 to 3 replicas", "watchhub:2397",
			[]answer{{ips: []string{"10.0.0.2"}}, {ips: []string{"10.0.0.2"}}, {ips: []string{"10.0.0.9", "10.0.0.2", "10.0.0.4"}}},
			[][]string{{"10.0.0.2:2397"}, {"10.0.0.2:2397", "10.0.0.4:2397", "10.0.0.9:2397"}}, 0},
		{"a replica stopped", "watchhub:2397",
			[]answer{{ips: []string{"10.0.0.2", "10.0.0.3"}}, {ips: []string{"10.0.0.3"}}},
			[][]string{{"10.0.0.2:2397", "10.0.0.3:2397"}, {"10.0.0.3:2397"}}, 0},
		{"no address yet is an error, then the host appears", "watchhub:2397",
			[]answer{{err: errNoHost}, {ips: []string{"10.0.0.5"}}},
			[][]string{{"10.0.0.5:2397"}}, 1},
		{"a failed lookup keeps the last addresses", "watchhub:2397",
			[]answer{{ips: []string{"10.0.0.5"}}, {err: errNoHost}, {ips: []string{"10.0.0.5"}}},
			[][]string{{"10.0.0.5:2397"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			lookups := 0
			lookup := func(_ context.Context, host string) ([]string, error) {
				mu.Lock()
				defer mu.Unlock()
				a := tt.answers[min(lookups, len(tt.answers)-1)]
				lookups++
				return a.ips, a.err
			}
			conn := &recordingConn{}
			b := hostResolverBuilder{lookup: lookup, interval: time.Millisecond, minGap: time.Millisecond}
			target, err := url.Parse(hostScheme + ":///" + tt.target)
			if err != nil {
				t.Fatal(err)
			}
			r, err := b.Build(resolver.Target{URL: *target}, conn, resolver.BuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waittest.Until(t, 5*time.Second, time.Millisecond, "every answer looked up", func() bool {
				mu.Lock()
				defer mu.Unlock()
				states, _ := conn.seen()
				return lookups > len(tt.answers)+1 || (len(tt.answers) == 1 && len(states) > 0)
			})
			r.Close()
			states, errs := conn.seen()
			if !slices.EqualFunc(states, tt.wantStates, slices.Equal[[]string]) || errs != tt.wantErrs {
				t.Fatalf("states %v, %d errors; want %v, %d errors", states, errs, tt.wantStates, tt.wantErrs)
			}
		})
	}
}

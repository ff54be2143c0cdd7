package watchtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/testing/watchtest"
)

// TestWatchers: watchers of a prefix that every write goes to reach the last revision with no failure; a
// write outside the prefix is a revision they never see, which is reported as a gap.
func TestWatchers(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := cli.Put(ctx, "other", "x")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision + 1
	watchers := watchtest.Start(ctx, []*clientv3.Client{cli, c.Client(t)}, 3, "p/", start)
	put := func(key string) int64 {
		resp, err := cli.Put(ctx, key, "v")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	var last int64
	for _, k := range []string{"p/a", "p/b", "p/c"} {
		last = put(k)
	}
	waittest.Until(t, 30*time.Second, 5*time.Millisecond, "watchers at the last revision", func() bool {
		return watchers.Done(last)
	})
	if err := watchers.ErrUnlessAt(last); err != nil {
		t.Fatalf("ErrUnlessAt(%d): %v", last, err)
	}
	if watchers.Done(last + 1) {
		t.Fatal("Done(last+1) before any write past last")
	}
	if err := watchers.ErrUnlessAt(last + 1); err == nil {
		t.Fatal("ErrUnlessAt(last+1) = nil, want an error")
	}
	put("q/outside")
	last = put("p/d")
	waittest.Until(t, 30*time.Second, 5*time.Millisecond, "watchers see the gap", func() bool {
		return watchers.Done(last)
	})
	if err := watchers.Err(); err == nil || !strings.Contains(err.Error(), "want") {
		t.Fatalf("Err() after a revision outside the prefix = %v, want a gap", err)
	}
}

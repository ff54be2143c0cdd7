package bench

import (
	"cmp"
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// ListOptions shape ListScenarios; zero fields take the defaults below.
type ListOptions struct {
	// Prefix is where the listed keys live. Default "/registry/pods/" (a Kubernetes LIST of pods).
	Prefix string
	// Keys and ValSize are how many keys the rows list and the size of each value. Defaults 5000 and 1024.
	Keys, ValSize int
	// Total is the LISTs of each row, issued by 10 clients on 10 connections. Default 400.
	Total int64
}

func (o ListOptions) withDefaults() ListOptions {
	o.Prefix = cmp.Or(o.Prefix, "/registry/pods/")
	o.Keys, o.ValSize, o.Total = cmp.Or(o.Keys, 5000), cmp.Or(o.ValSize, 1024), cmp.Or(o.Total, int64(400))
	return o
}

// listKey is the i-th listed key under prefix.
func listKey(prefix string, i int) string { return fmt.Sprintf("%sdefault/pod-%06d", prefix, i) }

// ListScenarios are the LIST rows of a comparison: a linearizable and a serializable range over every key under
// Prefix, with 10 clients on 10 connections, as a Kubernetes apiserver lists. Their setup writes the keys
// unless the prefix already holds exactly Keys of them; each LIST that does not return them all counts as an
// error.
func ListScenarios(opts ListOptions) []Scenario {
	opts = opts.withDefaults()
	end := clientv3.GetPrefixRangeEnd(opts.Prefix)
	list := func(consistency ...clientv3.OpOption) Op {
		return func(ctx context.Context, client *clientv3.Client, _ int64) error {
			resp, err := client.Get(ctx, opts.Prefix, append([]clientv3.OpOption{clientv3.WithRange(end)}, consistency...)...)
			if err == nil && len(resp.Kvs) != opts.Keys {
				err = fmt.Errorf("bench: LIST of %s returned %d keys, want %d", opts.Prefix, len(resp.Kvs), opts.Keys)
			}
			return err
		}
	}
	setup := func(ctx context.Context, client *clientv3.Client) error { return writeListKeys(ctx, client, opts) }
	name := fmt.Sprintf("list %d keys x %d B", opts.Keys, opts.ValSize)
	return []Scenario{
		{Name: name + " linearizable, 10 clients, 10 conns", Clients: 10, Conns: 10, Total: opts.Total, Setup: setup, Op: list()},
		{Name: name + " serializable, 10 clients, 10 conns", Clients: 10, Conns: 10, Total: opts.Total, Setup: setup,
			Op: list(clientv3.WithSerializable())},
	}
}

// writeListKeys writes the listed keys with 20 writers, unless the prefix already holds exactly those keys.
func writeListKeys(ctx context.Context, client *clientv3.Client, opts ListOptions) error {
	have, err := client.Get(ctx, opts.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if have.Count == int64(opts.Keys) {
		return nil
	}
	if _, err := client.Delete(ctx, opts.Prefix, clientv3.WithPrefix()); err != nil {
		return err
	}
	value, err := randomValue(opts.ValSize)
	if err != nil {
		return err
	}
	const writers = 20
	g, ctx := errgroup.WithContext(ctx)
	for w := range writers {
		g.Go(func() error {
			for i := w; i < opts.Keys; i += writers {
				if _, err := client.Put(ctx, listKey(opts.Prefix, i), value); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

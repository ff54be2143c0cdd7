package consensustest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/internal/commitlog"
)

// Commits follows one member's committed log and tells proposers when their entry committed, the way a
// storage matches applied entries to waiting requests.
type Commits struct {
	mu      sync.Mutex
	waiting map[string]chan uint64
	err     error
	done    chan struct{}
}

// WatchCommits follows log from index 1 until ctx ends.
func WatchCommits(ctx context.Context, log commitlog.Log) *Commits {
	c := &Commits{waiting: map[string]chan uint64{}, done: make(chan struct{})}
	go func() {
		err := log.Committed(ctx, 1, func(batch []commitlog.Entry) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, e := range batch {
				if ch, ok := c.waiting[string(e.Data)]; ok && e.Kind == commitlog.KindNormal {
					ch <- e.Index
					delete(c.waiting, string(e.Data))
				}
			}
			return nil
		})
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	}()
	return c
}

// await registers a wait for data's commit: the channel receives its index; forget ends the wait.
func (c *Commits) await(data []byte) (ch chan uint64, forget func()) {
	ch = make(chan uint64, 1)
	c.mu.Lock()
	c.waiting[string(data)] = ch
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		delete(c.waiting, string(data))
		c.mu.Unlock()
	}
}

// Propose proposes data through log and waits until it is committed on the watched member, returning its
// index. data must be unique among the proposals waiting at the same time.
func (c *Commits) Propose(ctx context.Context, log commitlog.Log, data []byte) (uint64, error) {
	ch, forget := c.await(data)
	defer forget()
	if err := log.Propose(ctx, data); err != nil {
		return 0, err
	}
	index, _, err := c.wait(ctx, ch, nil)
	return index, err
}

// wait waits for ch's index, ctx's end, the watch's end or retry (nil: never); retried reports the last.
func (c *Commits) wait(ctx context.Context, ch <-chan uint64, retry <-chan time.Time) (index uint64, retried bool, err error) {
	select {
	case index := <-ch:
		return index, false, nil
	case <-ctx.Done():
		return 0, false, ctx.Err()
	case <-c.done:
		return 0, false, c.err
	case <-retry:
		return 0, true, nil
	}
}

// ProposeUntilCommitted is Propose for proposals that raft may drop: a proposal that a leader change overtakes
// (forwarded to, or appended only by, a leader that lost its role) is dropped without an error, as in etcd,
// whose clients see a timeout and retry. It proposes data again whenever retryAfter passes without its
// commit, or at once when it is refused, until ctx ends; data may therefore commit more than once, and the
// index of the first commit is returned.
func (c *Commits) ProposeUntilCommitted(ctx context.Context, log commitlog.Log, data []byte, retryAfter time.Duration) (uint64, error) {
	ch, forget := c.await(data)
	defer forget()
	retry := time.NewTimer(retryAfter)
	defer retry.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, retryAfter)
		err := log.Propose(attempt, data)
		cancel()
		if err != nil {
			retry.Reset(10 * time.Millisecond) // refused (no leader yet, a full queue): a short pause
		} else {
			retry.Reset(retryAfter)
		}
		if index, retried, err := c.wait(ctx, ch, retry.C); !retried {
			return index, err
		}
	}
}

// ReadLog reads log through Committed from index 1 up to and including upTo; a snapshot entry at or past
// upTo ends it too. The entries' data are copies.
func ReadLog(ctx context.Context, log commitlog.Log, upTo uint64) ([]commitlog.Entry, error) {
	return ReadLogFrom(ctx, log, 1, upTo)
}

// ReadLogFrom is ReadLog from index from on.
func ReadLogFrom(ctx context.Context, log commitlog.Log, from, upTo uint64) ([]commitlog.Entry, error) {
	var out []commitlog.Entry
	stop := errors.New("read enough")
	err := log.Committed(ctx, from, func(batch []commitlog.Entry) error {
		for _, e := range batch {
			if e.Index > upTo && e.Kind != commitlog.KindSnapshot {
				return stop
			}
			e.Data = append([]byte(nil), e.Data...)
			out = append(out, e)
			if e.Index >= upTo {
				return stop
			}
		}
		return nil
	})
	if !errors.Is(err, stop) {
		return out, fmt.Errorf("reading the committed log up to %d: %w (got %d entries)", upTo, err, len(out))
	}
	return out, nil
}

package watchhub

import (
	"bytes"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/pkg/v3/adt"
)

// etcd's errors for a watch that cannot be created, sent as the cancel reason (their text is etcd's).
var (
	errEmptyWatcherRange = errors.New("mvcc: watcher range is empty")
	errDuplicateWatchID  = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
)

// rangeKind says which keys a watch covers.
type rangeKind uint8

const (
	rangeKey     rangeKind = iota // exactly key
	rangeBetween                  // key <= k < end
	rangeFromKey                  // key <= k
)

// watchSpec is what a watch receives, normalized as etcd normalizes a create request. Watchers with equal
// specs receive identical events at each revision, so they share one group and one encoding.
type watchSpec struct {
	key, end []byte
	kind     rangeKind
	noPut    bool
	noDelete bool
	prevKV   bool
	fragment bool
}

// specFromRequest normalizes a create request the way etcd's watch server does: an empty key is "\x00", a
// range end of "\x00" means every key from key on, and a range whose end is not above its key is refused.
func specFromRequest(req *pb.WatchCreateRequest) (watchSpec, error) {
	s := watchSpec{key: req.Key, prevKV: req.PrevKv, fragment: req.Fragment}
	if len(s.key) == 0 {
		s.key = []byte{0}
	}
	switch {
	case len(req.RangeEnd) == 0:
		s.kind = rangeKey
	case len(req.RangeEnd) == 1 && req.RangeEnd[0] == 0:
		s.kind = rangeFromKey
	default:
		s.kind, s.end = rangeBetween, req.RangeEnd
		if bytes.Compare(s.key, s.end) >= 0 {
			return watchSpec{}, errEmptyWatcherRange
		}
	}
	for _, f := range req.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			s.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			s.noDelete = true
		}
	}
	return s, nil
}

// contains reports whether the watch covers key.
func (s *watchSpec) contains(key []byte) bool {
	switch s.kind {
	case rangeKey:
		return bytes.Equal(key, s.key)
	case rangeFromKey:
		return bytes.Compare(key, s.key) >= 0
	default:
		return bytes.Compare(key, s.key) >= 0 && bytes.Compare(key, s.end) < 0
	}
}

// keeps reports whether the filters let ev through.
func (s *watchSpec) keeps(ev *mvccpb.Event) bool {
	if ev.Type == mvccpb.PUT {
		return !s.noPut
	}
	return !s.noDelete
}

// project returns ev as this watch receives it: with PrevKv only if it asked for it and, as in etcd (which
// reads the previous version at ModRevision-1), only if that revision is not compacted. ev is never modified.
func (s *watchSpec) project(ev *mvccpb.Event, compactRev int64) *mvccpb.Event {
	if ev.PrevKv == nil || (s.prevKV && ev.Kv.ModRevision > compactRev) {
		return ev
	}
	return &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
}

// selectEvents appends to dst the events this watch receives.
func (s *watchSpec) selectEvents(dst []*mvccpb.Event, events []*mvccpb.Event, compactRev int64) []*mvccpb.Event {
	for _, ev := range events {
		if s.contains(ev.Kv.Key) && s.keeps(ev) {
			dst = append(dst, s.project(ev, compactRev))
		}
	}
	return dst
}

// historyRange is the key range to ask storage history for, in etcd's request form.
func (s *watchSpec) historyRange() (key, rangeEnd []byte) {
	switch s.kind {
	case rangeKey:
		return s.key, nil
	case rangeFromKey:
		return s.key, []byte{0}
	default:
		return s.key, s.end
	}
}

// groupKey identifies the spec as a map key.
func (s *watchSpec) groupKey() string {
	flags := byte(s.kind)
	for i, b := range []bool{s.noPut, s.noDelete, s.prevKV, s.fragment} {
		if b {
			flags |= 1 << (i + 2)
		}
	}
	buf := make([]byte, 0, 1+4+len(s.key)+len(s.end))
	buf = append(buf, flags, byte(len(s.key)>>24), byte(len(s.key)>>16), byte(len(s.key)>>8), byte(len(s.key)))
	buf = append(buf, s.key...)
	return string(append(buf, s.end...))
}

// interval is the spec's range in the interval tree ("" as the end means no end).
func (s *watchSpec) interval() adt.Interval {
	if s.kind == rangeFromKey {
		return adt.NewStringAffineInterval(string(s.key), "")
	}
	return adt.NewStringAffineInterval(string(s.key), string(s.end))
}

// group is the set of synced watchers with one spec: the hub matches an event against the group once,
// encodes the group's response once, and hands the same bytes to every member. Its watchers are split into
// the index's shards by their stream's shard (fanout.go), each shard in the order its watchers joined.
type group struct {
	spec   watchSpec
	key    string
	shards [][]*watcher
	size   int // watchers in all shards
	// batch collects the current revision's events for the group while the hub fans it out; shape says which
	// of the revision's events they are and which lost their prev_kv (see responseShape).
	batch []*mvccpb.Event
	shape responseShape
}

// groupIndex finds the groups whose range contains a key: single-key groups by map, ranges by interval tree.
type groupIndex struct {
	byKey  map[string]*group
	single map[string][]*group
	ranges adt.IntervalTree
	shards int // the fan-out's shards: every group splits its watchers in as many lists
}

func newGroupIndex(shards int) *groupIndex {
	return &groupIndex{byKey: map[string]*group{}, single: map[string][]*group{}, ranges: adt.NewIntervalTree(),
		shards: max(1, shards)}
}

// join adds w to the group of its spec, creating the group when it is the first.
func (x *groupIndex) join(w *watcher) {
	key := w.spec.groupKey()
	g := x.byKey[key]
	if g == nil {
		g = &group{spec: w.spec, key: key, shards: make([][]*watcher, x.shards)}
		x.byKey[key] = g
		x.addGroup(g)
	}
	shard := w.shard(x.shards)
	w.group, w.slot = g, len(g.shards[shard])
	g.shards[shard] = append(g.shards[shard], w)
	g.size++
}

// leave removes w from its group, dropping the group when it was the last.
func (x *groupIndex) leave(w *watcher) {
	g := w.group
	if g == nil {
		return
	}
	ws := g.shards[w.shard(x.shards)]
	last := len(ws) - 1
	ws[w.slot] = ws[last]
	ws[w.slot].slot = w.slot
	ws[last] = nil
	g.shards[w.shard(x.shards)] = ws[:last]
	g.size--
	w.group = nil
	if g.size == 0 {
		delete(x.byKey, g.key)
		x.removeGroup(g)
	}
}

func (x *groupIndex) addGroup(g *group) {
	if g.spec.kind == rangeKey {
		x.single[string(g.spec.key)] = append(x.single[string(g.spec.key)], g)
		return
	}
	ivl := g.spec.interval()
	if iv := x.ranges.Find(ivl); iv != nil {
		iv.Val = append(iv.Val.([]*group), g)
		return
	}
	x.ranges.Insert(ivl, []*group{g})
}

func (x *groupIndex) removeGroup(g *group) {
	if g.spec.kind == rangeKey {
		k := string(g.spec.key)
		x.single[k] = removeGroup(x.single[k], g)
		if len(x.single[k]) == 0 {
			delete(x.single, k)
		}
		return
	}
	ivl := g.spec.interval()
	iv := x.ranges.Find(ivl)
	if iv == nil {
		return
	}
	rest := removeGroup(iv.Val.([]*group), g)
	if len(rest) == 0 {
		x.ranges.Delete(ivl)
		return
	}
	iv.Val = rest
}

func removeGroup(gs []*group, g *group) []*group {
	for i := range gs {
		if gs[i] == g {
			gs[i] = gs[len(gs)-1]
			return gs[:len(gs)-1]
		}
	}
	return gs
}

// matching calls visit for every group whose range contains key.
func (x *groupIndex) matching(key []byte, visit func(*group)) {
	for _, g := range x.single[string(key)] {
		visit(g)
	}
	if x.ranges.Len() == 0 {
		return
	}
	x.ranges.Visit(adt.NewStringAffinePoint(string(key)), func(iv *adt.IntervalValue) bool {
		for _, g := range iv.Val.([]*group) {
			visit(g)
		}
		return true
	})
}

// len is the number of groups.
func (x *groupIndex) len() int { return len(x.byKey) }

package watchhub

import (
	"bytes"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

func rev(n int64) revisionEvents {
	return newRevisionEvents(n, []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: n}}}, nil, time.Time{})
}

func revs(run []revisionEvents) []int64 {
	var out []int64
	for _, r := range run {
		out = append(out, r.rev)
	}
	return out
}

func TestSequencer(t *testing.T) {
	t.Parallel()
	type step struct {
		offer      int64 // 0: noteExists instead
		exists     int64
		wantRun    []int64
		wantResult offerResult
		wantGap    [2]int64 // {0, 0}: none
	}
	tests := []struct {
		name       string
		head       int64
		maxPending int
		steps      []step
	}{
		{"in order", 5, 10, []step{
			{offer: 6, wantRun: []int64{6}, wantResult: offerDelivered},
			{offer: 7, wantRun: []int64{7}, wantResult: offerDelivered},
		}},
		{"duplicates from every member", 5, 10, []step{
			{offer: 6, wantRun: []int64{6}, wantResult: offerDelivered},
			{offer: 6, wantResult: offerDuplicate},
			{offer: 5, wantResult: offerDuplicate},
			{offer: 2, wantResult: offerDuplicate},
		}},
		{"a jump is a gap until filled", 5, 10, []step{
			{offer: 9, wantResult: offerEarly, wantGap: [2]int64{6, 8}},
			{offer: 9, wantResult: offerDuplicate, wantGap: [2]int64{6, 8}},
			{offer: 7, wantResult: offerEarly, wantGap: [2]int64{6, 6}},
			{offer: 6, wantRun: []int64{6, 7}, wantResult: offerDelivered, wantGap: [2]int64{8, 8}},
			{offer: 8, wantRun: []int64{8, 9}, wantResult: offerDelivered},
		}},
		{"a stalled tail is a gap", 5, 10, []step{
			{exists: 8, wantGap: [2]int64{6, 8}},
			{offer: 6, wantRun: []int64{6}, wantResult: offerDelivered, wantGap: [2]int64{7, 8}},
			{exists: 3, wantGap: [2]int64{7, 8}},
		}},
		{"held revisions are bounded", 5, 2, []step{
			{offer: 10, wantResult: offerEarly, wantGap: [2]int64{6, 9}},
			{offer: 9, wantResult: offerEarly, wantGap: [2]int64{6, 8}},
			{offer: 8, wantResult: offerDropped, wantGap: [2]int64{6, 8}},
			{offer: 6, wantRun: []int64{6}, wantResult: offerDelivered, wantGap: [2]int64{7, 8}},
			{offer: 7, wantRun: []int64{7}, wantResult: offerDelivered, wantGap: [2]int64{8, 8}},
			{offer: 8, wantRun: []int64{8, 9, 10}, wantResult: offerDelivered},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSequencer(tc.head, tc.maxPending)
			for i, st := range tc.steps {
				if st.offer != 0 {
					run, result := s.offer(rev(st.offer))
					if !slices.Equal(revs(run), st.wantRun) || result != st.wantResult {
						t.Fatalf("step %d: offer(%d) = %v, %v; want %v, %v", i, st.offer, revs(run), result, st.wantRun, st.wantResult)
					}
				} else {
					s.noteExists(st.exists)
				}
				from, to, ok := s.missing()
				if got := [2]int64{from, to}; ok != (st.wantGap != [2]int64{}) || got != st.wantGap {
					t.Fatalf("step %d: missing() = %v %v, want %v", i, got, ok, st.wantGap)
				}
			}
		})
	}
}

func TestSequencerSkipTo(t *testing.T) {
	t.Parallel()
	s := newSequencer(5, 10)
	s.offer(rev(9))
	s.offer(rev(12))
	s.skipTo(10)
	if s.head() != 9 {
		t.Fatalf("head after skipTo(10) = %d, want 9", s.head())
	}
	if from, to, ok := s.missing(); !ok || from != 10 || to != 11 {
		t.Fatalf("missing after skip = %d..%d %v, want 10..11", from, to, ok)
	}
	if run, _ := s.offer(rev(9)); run != nil {
		t.Fatalf("a revision below the skip was delivered: %v", revs(run))
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	sized := func(n int64, size int) revisionEvents { r := rev(n); r.bytes = size; return r }
	tests := []struct {
		name              string
		maxRevs, maxBytes int
		add               []revisionEvents
		wantFirst         int64
	}{
		{"under both bounds", 5, 1000, []revisionEvents{sized(11, 10), sized(12, 10)}, 11},
		{"revision bound", 3, 1000, []revisionEvents{sized(11, 10), sized(12, 10), sized(13, 10), sized(14, 10), sized(15, 10)}, 13},
		{"byte bound", 10, 25, []revisionEvents{sized(11, 10), sized(12, 10), sized(13, 10)}, 12},
		{"a revision above the byte bound is still kept", 10, 25, []revisionEvents{sized(11, 10), sized(12, 100)}, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWindow(10, tc.maxRevs, tc.maxBytes)
			if w.first() != 11 {
				t.Fatalf("empty window first = %d, want 11", w.first())
			}
			for _, r := range tc.add {
				if err := w.append(r); err != nil {
					t.Fatal(err)
				}
			}
			last := tc.add[len(tc.add)-1].rev
			if w.first() != tc.wantFirst || w.head != last {
				t.Fatalf("window [%d, %d], want [%d, %d]", w.first(), w.head, tc.wantFirst, last)
			}
			for n := tc.wantFirst - 1; n <= last+1; n++ {
				r, ok := w.at(n)
				if ok != (n >= tc.wantFirst && n <= last) || (ok && r.rev != n) {
					t.Fatalf("at(%d) = %v, %v", n, r, ok)
				}
			}
			if err := w.append(rev(last + 2)); err == nil {
				t.Fatal("a non-contiguous append was accepted")
			}
			w.reset(100)
			if w.first() != 101 || w.bytes != 0 {
				t.Fatalf("after reset: first %d bytes %d", w.first(), w.bytes)
			}
		})
	}
}

func TestSpecFromRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		req      *pb.WatchCreateRequest
		wantErr  error
		in, out  []string
		wantKind rangeKind
	}{
		{"single key", &pb.WatchCreateRequest{Key: []byte("a")}, nil, []string{"a"}, []string{"", "b", "a\x00", "aa"}, rangeKey},
		{"empty key is \\x00", &pb.WatchCreateRequest{}, nil, []string{"\x00"}, []string{"", "a"}, rangeKey},
		{"range", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("c")}, nil, []string{"a", "b", "bzz"}, []string{"c", "0", "d"}, rangeBetween},
		{"prefix", &pb.WatchCreateRequest{Key: []byte("ab"), RangeEnd: []byte("ac")}, nil, []string{"ab", "abc"}, []string{"a", "ac", "b"}, rangeBetween},
		{"from key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte{0}}, nil, []string{"b", "c", "\xff\xff"}, []string{"a", "az"}, rangeFromKey},
		{"every key", &pb.WatchCreateRequest{RangeEnd: []byte{0}}, nil, []string{"\x00", "a", "zz"}, nil, rangeFromKey},
		{"end below key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}, errEmptyWatcherRange, nil, nil, 0},
		{"end equal to key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}, errEmptyWatcherRange, nil, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := specFromRequest(tc.req)
			if err != tc.wantErr {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if s.kind != tc.wantKind {
				t.Fatalf("kind = %v, want %v", s.kind, tc.wantKind)
			}
			for _, k := range tc.in {
				if !s.contains([]byte(k)) {
					t.Errorf("%q not contained", k)
				}
			}
			for _, k := range tc.out {
				if s.contains([]byte(k)) {
					t.Errorf("%q contained", k)
				}
			}
			// The index must agree with contains for every key.
			x := newGroupIndex(1)
			w := &watcher{spec: s}
			x.join(w)
			for _, k := range append(append([]string{}, tc.in...), tc.out...) {
				found := false
				x.matching([]byte(k), func(g *group) { found = found || g == w.group })
				if found != s.contains([]byte(k)) {
					t.Errorf("index match of %q = %v, contains = %v", k, found, s.contains([]byte(k)))
				}
			}
		})
	}
}

func TestFiltersAndProjection(t *testing.T) {
	t.Parallel()
	prev := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("old"), ModRevision: 4}
	putEv := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: 5}, PrevKv: prev}
	delEv := &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: 6}, PrevKv: prev}
	other := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("x"), ModRevision: 6}}
	filter := func(f ...pb.WatchCreateRequest_FilterType) []pb.WatchCreateRequest_FilterType { return f }
	tests := []struct {
		name       string
		req        *pb.WatchCreateRequest
		compactRev int64
		wantTypes  []mvccpb.Event_EventType
		wantPrev   bool
	}{
		{"no filters", &pb.WatchCreateRequest{Key: []byte("k")}, 0, []mvccpb.Event_EventType{mvccpb.PUT, mvccpb.DELETE}, false},
		{"noput", &pb.WatchCreateRequest{Key: []byte("k"), Filters: filter(pb.WatchCreateRequest_NOPUT)}, 0, []mvccpb.Event_EventType{mvccpb.DELETE}, false},
		{"nodelete", &pb.WatchCreateRequest{Key: []byte("k"), Filters: filter(pb.WatchCreateRequest_NODELETE)}, 0, []mvccpb.Event_EventType{mvccpb.PUT}, false},
		{"both", &pb.WatchCreateRequest{Key: []byte("k"), Filters: filter(pb.WatchCreateRequest_NOPUT, pb.WatchCreateRequest_NODELETE)}, 0, nil, false},
		{"prev kv", &pb.WatchCreateRequest{Key: []byte("k"), PrevKv: true}, 0, []mvccpb.Event_EventType{mvccpb.PUT, mvccpb.DELETE}, true},
		{"prev kv compacted away", &pb.WatchCreateRequest{Key: []byte("k"), PrevKv: true}, 6, []mvccpb.Event_EventType{mvccpb.PUT, mvccpb.DELETE}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := specFromRequest(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			got := s.selectEvents(nil, []*mvccpb.Event{putEv, delEv, other}, tc.compactRev)
			var types []mvccpb.Event_EventType
			for _, ev := range got {
				types = append(types, ev.Type)
				if (ev.PrevKv != nil) != tc.wantPrev {
					t.Errorf("event %v prev kv = %v, want present %v", ev.Type, ev.PrevKv, tc.wantPrev)
				}
			}
			if !slices.Equal(types, tc.wantTypes) {
				t.Fatalf("types = %v, want %v", types, tc.wantTypes)
			}
			if putEv.PrevKv == nil || delEv.PrevKv == nil {
				t.Fatal("projection modified the shared event")
			}
		})
	}
}

func TestGroupIndexSharesGroupsBySpec(t *testing.T) {
	t.Parallel()
	x := newGroupIndex(2)
	spec := func(req *pb.WatchCreateRequest) watchSpec { s, _ := specFromRequest(req); return s }
	a1 := &watcher{spec: spec(&pb.WatchCreateRequest{Key: []byte("a")})}
	a2 := &watcher{spec: spec(&pb.WatchCreateRequest{Key: []byte("a")})}
	aPrev := &watcher{spec: spec(&pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true})}
	r1 := &watcher{spec: spec(&pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("c")})}
	r2 := &watcher{spec: spec(&pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("c")})}
	rNoPut := &watcher{spec: spec(&pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("c"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}})}
	for _, w := range []*watcher{a1, a2, aPrev, r1, r2, rNoPut} {
		x.join(w)
	}
	if a1.group != a2.group || r1.group != r2.group || a1.group == aPrev.group || r1.group == rNoPut.group {
		t.Fatal("groups are not shared exactly by equal specs")
	}
	if x.len() != 4 {
		t.Fatalf("%d groups, want 4", x.len())
	}
	count := func(key string) int {
		n := 0
		x.matching([]byte(key), func(*group) { n++ })
		return n
	}
	if count("a") != 4 || count("b") != 2 || count("c") != 0 {
		t.Fatalf("matching groups a=%d b=%d c=%d, want 4 2 0", count("a"), count("b"), count("c"))
	}
	for _, w := range []*watcher{a1, r1, rNoPut, a2} {
		x.leave(w)
	}
	if x.len() != 2 || count("a") != 2 || count("b") != 1 || a2.group != nil || r2.group == nil || r2.group.shards[0][r2.slot] != r2 {
		t.Fatalf("after leaving: %d groups, a=%d b=%d", x.len(), count("a"), count("b"))
	}
}

func TestSplitFragmentsAsEtcd(t *testing.T) {
	t.Parallel()
	ev := func(size int) *mvccpb.Event {
		return &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), size)}}
	}
	tests := []struct {
		name      string
		events    []int
		limit     int
		wantParts []int // events per part
	}{
		{"small stays whole", []int{10, 10}, 1000, []int{2}},
		{"one event is never cut", []int{5000}, 1000, []int{1}},
		{"cut at the limit", []int{400, 400, 400, 400}, 1000, []int{2, 2}},
		{"every event alone", []int{900, 900, 900}, 1000, []int{1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 9}, WatchId: 3}
			for _, size := range tc.events {
				resp.Events = append(resp.Events, ev(size))
			}
			parts := splitFragments(resp, tc.limit)
			var got []int
			for i, p := range parts {
				got = append(got, len(p.Events))
				if p.Fragment != (i < len(parts)-1) || p.WatchId != 3 || p.Header.Revision != 9 {
					t.Fatalf("part %d: fragment=%v id=%d", i, p.Fragment, p.WatchId)
				}
				if len(p.Events) > 1 && proto.Size(p) >= tc.limit {
					t.Fatalf("part %d is %d bytes, limit %d", i, proto.Size(p), tc.limit)
				}
			}
			if !slices.Equal(got, tc.wantParts) {
				t.Fatalf("parts = %v, want %v", got, tc.wantParts)
			}
		})
	}
}

// TestSharedEncodingDecodesAsTheResponse: a watcher's copy of a shared response (its watch ID, then the
// shared bytes) decodes exactly as the response marshalled for it alone.
func TestSharedEncodingDecodesAsTheResponse(t *testing.T) {
	t.Parallel()
	header := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 42, RaftTerm: 3}
	events := []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), ModRevision: 42}},
		{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("b"), ModRevision: 42}}}
	shared, err := encodeShared(header, events, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := newCodec()
	var lists wiremsg.BufferLists
	for _, id := range []int64{0, 1, 300, 1 << 40, -1} {
		for _, from := range []*wiremsg.BufferLists{nil, &lists} { // a list of its own, or one cut from a stream's
			field := new(watchIDField)
			field.set(id)
			out, err := c.Marshal(&encodedResponse{watchID: field.buffer(from), part: shared.boxed[0], lists: from})
			if err != nil {
				t.Fatal(err)
			}
			if from != nil && len(field.field) <= wiremsg.SmallCopyMax { // copied (a longer one points at field)
				field.set(id + 7) // the copy gRPC holds stays as it was marshalled
			}
			var got pb.WatchResponse
			if err := proto.Unmarshal(out.Materialize(), &got); err != nil {
				t.Fatal(err)
			}
			want := &pb.WatchResponse{Header: header, WatchId: id, Events: events}
			if !proto.Equal(&got, want) {
				t.Fatalf("watch id %d (stream's lists %v): decoded %v, want %v", id, from != nil, &got, want)
			}
		}
	}
	// Other messages go through the protobuf codec.
	out, err := c.Marshal(&pb.WatchResponse{WatchId: 5, Created: true})
	if err != nil {
		t.Fatal(err)
	}
	var got pb.WatchResponse
	if err := c.Unmarshal(out, &got); err != nil || got.WatchId != 5 || !got.Created {
		t.Fatalf("plain response round trip = %v, %v", &got, err)
	}
}

func TestRevisionAssembler(t *testing.T) {
	t.Parallel()
	ev := func(rev int64) *mvccpb.Event { return &mvccpb.Event{Kv: &mvccpb.KeyValue{ModRevision: rev}} }
	var a revisionAssembler
	var done []revisionEvents
	for _, page := range [][]*mvccpb.Event{{ev(3), ev(3), ev(4)}, {ev(4)}, {ev(4), ev(6)}, {}} {
		done = append(done, a.add(page)...)
	}
	done = append(done, a.finish()...)
	var got []string
	for _, r := range done {
		got = append(got, fmt.Sprintf("%d:%d", r.rev, len(r.events)))
	}
	if want := "3:2 4:3 6:1"; strings.Join(got, " ") != want {
		t.Fatalf("revisions = %v, want %s", got, want)
	}
	if a.finish() != nil {
		t.Fatal("finish twice returned a revision again")
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	good := Config{}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if good.ProgressNotifyInterval != 10*time.Minute || good.MaxRequestBytes != 1572864 || good.fragmentBytes() != 1572864+512*1024 {
		t.Fatalf("defaults are not etcd's: %+v", good)
	}
	if c := (Config{ProgressNotifyInterval: time.Millisecond}).WithDefaults(); c.ProgressNotifyInterval != MinProgressNotifyInterval {
		t.Fatalf("progress interval not raised to etcd's minimum: %v", c.ProgressNotifyInterval)
	}
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"bad listen url", func(c *Config) { c.ListenURL = "ftp://x:1" }, "--listen-url"},
		{"no storage", func(c *Config) { c.StorageEndpoints = nil }, "--storage-endpoints"},
		{"bad storage url", func(c *Config) { c.StorageEndpoints = []string{"https://a:1"} }, "--storage-endpoints"},
		{"negative window", func(c *Config) { c.WindowRevisions = -1 }, "--window-revisions"},
		{"negative poll", func(c *Config) { c.StoragePollInterval = -time.Second }, "--storage-poll-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := good
			tc.modify(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	c := Config{}.WithDefaults()
	fs := flag.NewFlagSet("watchhub", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--storage-endpoints", "http://a:1, http://b:2", "--nats-url", "nats://n:4222",
		"--watch-progress-notify-interval", "5s", "--max-request-bytes", "1024", "--listen-url", "http://127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.StorageEndpoints, []string{"http://a:1", "http://b:2"}) || c.NATSURL != "nats://n:4222" ||
		c.ProgressNotifyInterval != 5*time.Second || c.MaxRequestBytes != 1024 || c.WindowRevisions != DefaultWindowRevisions {
		t.Fatalf("flags parsed into %+v", c)
	}
}

// newWatchIDField returns the encoded watch_id field of id as a buffer of its own.
func newWatchIDField(id int64) mem.Buffer {
	f := new(watchIDField)
	f.set(id)
	return f.buffer(nil)
}

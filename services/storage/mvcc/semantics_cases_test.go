package mvcc

import (
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// semanticsCase is a sequence of etcd requests on a fresh store. What each returns (response or gRPC error) was
// recorded from real etcd v3.7.3 into testdata/etcd-golden.json (TestSemanticsMatchEtcd regenerates it when
// CAIRN_ETCD_BIN names an etcd binary), and the store must return exactly the same.
type semanticsCase struct {
	name  string
	steps []*pb.InternalRaftRequest
}

const (
	asc  = pb.RangeRequest_ASCEND
	desc = pb.RangeRequest_DESCEND
	none = pb.RangeRequest_NONE
)

var (
	tKey     = pb.RangeRequest_KEY
	tVersion = pb.RangeRequest_VERSION
	tCreate  = pb.RangeRequest_CREATE
	tMod     = pb.RangeRequest_MOD
	tValue   = pb.RangeRequest_VALUE

	cValue   = pb.Compare_VALUE
	cVersion = pb.Compare_VERSION
	cCreate  = pb.Compare_CREATE
	cMod     = pb.Compare_MOD
	cLease   = pb.Compare_LEASE

	eq  = pb.Compare_EQUAL
	gt  = pb.Compare_GREATER
	lt  = pb.Compare_LESS
	neq = pb.Compare_NOT_EQUAL
)

// rangeFixture is a few keys with distinct versions, create and mod revisions (revisions 2..10).
func rangeFixture() []*pb.InternalRaftRequest {
	return []*pb.InternalRaftRequest{
		put("a", "3"), put("b", "1"), put("c", "2"), put("foo", "x"), put("foo1", "y"),
		put("a", "0"), put("foo2", "z"), put("b", "9"), put("a", "5"),
	}
}

func withFixture(steps ...*pb.InternalRaftRequest) []*pb.InternalRaftRequest {
	return append(rangeFixture(), steps...)
}

var semanticsCases = []semanticsCase{
	{"range/single-and-missing", withFixture(get("a", ""), get("zz", ""), get("a", "", atRev(2)), get("a", "", atRev(1)))},
	{"range/interval-prefix-fromkey", withFixture(get("a", "c"), get("foo", "fop"), get("c", "\x00"), get("\x00", "\x00"),
		get("c", "a"), get("a", "a"))},
	{"range/limit-more-count", withFixture(get("a", "\x00", limit(2)), get("a", "\x00", limit(6)), get("a", "\x00", limit(7)),
		get("a", "\x00", limit(2), countOnly), get("a", "\x00", limit(-1)))},
	{"range/keys-and-count-only", withFixture(get("a", "\x00", keysOnly), get("a", "\x00", countOnly), get("a", "", keysOnly),
		get("a", "\x00", keysOnly, sortBy(tValue, asc)), get("a", "\x00", keysOnly, countOnly))},
	{"range/sort", withFixture(
		get("a", "\x00", sortBy(tKey, desc)), get("a", "\x00", sortBy(tKey, asc)), get("a", "\x00", sortBy(tVersion, asc)),
		get("a", "\x00", sortBy(tVersion, desc)), get("a", "\x00", sortBy(tVersion, none)), get("a", "\x00", sortBy(tCreate, desc)),
		get("a", "\x00", sortBy(tMod, asc)), get("a", "\x00", sortBy(tMod, desc)), get("a", "\x00", sortBy(tValue, asc)),
		get("a", "\x00", sortBy(tValue, desc)), get("a", "\x00", sortBy(tMod, desc), limit(2)),
		get("a", "\x00", sortBy(tKey, none), limit(2)))},
	{"range/revision-filters", withFixture(
		get("a", "\x00", minMod(5)), get("a", "\x00", maxMod(5)), get("a", "\x00", minCreate(4)), get("a", "\x00", maxCreate(4)),
		get("a", "\x00", minMod(4), maxMod(8), limit(1)), get("a", "\x00", minCreate(3), limit(1), countOnly))},
	{"range/time-travel", withFixture(get("a", "\x00", atRev(4)), get("a", "\x00", atRev(10)), get("a", "\x00", atRev(11)),
		get("a", "\x00", atRev(-1)), get("foo", "fop", atRev(6), keysOnly))},
	{"range/bad-input", withFixture(get("", ""), get("", "\x00"),
		get("a", "", sortBy(tKey, pb.RangeRequest_SortOrder(7))), get("a", "", sortBy(pb.RangeRequest_SortTarget(9), asc)))},

	{"put/prev-kv", []*pb.InternalRaftRequest{put("k", "v1", withPrevKV), put("k", "v2", withPrevKV), get("k", ""),
		del("k", "", false), put("k", "v3", withPrevKV), get("k", "")}},
	{"put/ignore-value-and-lease", []*pb.InternalRaftRequest{
		put("k", "", ignoreValue), put("k", "", ignoreLease), grant(100, 60), put("k", "v1", withLease(100)),
		put("k", "", ignoreValue, withPrevKV), get("k", ""), put("k", "v2", ignoreLease), get("k", ""),
		put("k", "x", ignoreValue), put("k", "", ignoreLease, withLease(100)), put("k", "", ignoreValue, ignoreLease, withPrevKV),
		put("k", "v3"), get("k", "")}},
	{"put/lease-not-found", []*pb.InternalRaftRequest{put("k", "v", withLease(7)), get("k", ""), put("", "v")}},
	{"put/too-large", []*pb.InternalRaftRequest{put("k", strings.Repeat("x", 1600*1024)), put("k", strings.Repeat("x", 1000*1024)), get("k", "", keysOnly)}},

	{"delete/no-op-keeps-revision", []*pb.InternalRaftRequest{put("a", "1"), del("zz", "", false), del("b", "c", true), get("a", ""),
		del("", "", false)}},
	{"delete/prev-kv-and-count", withFixture(del("foo", "fop", true), get("a", "\x00", countOnly), del("b", "\x00", false),
		get("a", "\x00"), del("\x00", "\x00", true), get("a", "\x00"))},
	{"delete/recreate-resets-version", []*pb.InternalRaftRequest{put("k", "1"), put("k", "2"), del("k", "", false), put("k", "3"),
		get("k", ""), get("k", "", atRev(3))}},

	{"txn/compare-targets", withFixture(
		txn(cmps(cmp("a", "", cValue, eq, "5")), ops(get("a", "")), ops(get("b", ""))),
		txn(cmps(cmp("a", "", cValue, gt, "4"), cmp("a", "", cValue, lt, "6")), ops(get("a", "")), nil),
		txn(cmps(cmp("a", "", cValue, neq, "5")), nil, ops(get("c", ""))),
		txn(cmps(cmp("a", "", cVersion, eq, 3)), ops(get("a", "", countOnly)), nil),
		txn(cmps(cmp("a", "", cCreate, eq, 2)), ops(get("a", "", keysOnly)), nil),
		txn(cmps(cmp("a", "", cMod, gt, 9)), ops(get("a", "")), ops(get("b", ""))),
		txn(cmps(cmp("a", "", cMod, lt, 10)), ops(get("a", "")), ops(get("b", ""))),
		txn(cmps(cmp("a", "", cLease, eq, 0)), ops(get("a", "")), nil))},
	{"txn/compare-missing-and-ranges", withFixture(
		txn(cmps(cmp("zz", "", cValue, eq, "")), nil, nil), txn(cmps(cmp("zz", "", cValue, neq, "x")), nil, nil),
		txn(cmps(cmp("zz", "", cVersion, eq, 0)), nil, nil), txn(cmps(cmp("zz", "", cCreate, eq, 0)), nil, nil),
		txn(cmps(cmp("zz", "", cMod, lt, 1)), nil, nil), txn(cmps(cmp("zz", "", cLease, eq, 0)), nil, nil),
		txn(cmps(cmp("foo", "fop", cVersion, eq, 1)), nil, nil), txn(cmps(cmp("a", "\x00", cVersion, gt, 0)), nil, nil),
		txn(cmps(cmp("a", "\x00", cVersion, gt, 1)), nil, nil), txn(cmps(cmp("a", "\x00", cValue, gt, "0")), nil, nil),
		txn(cmps(cmp("foo", "fop", cMod, lt, 9)), nil, nil), txn(cmps(cmp("x", "y", cValue, eq, "")), nil, nil))},
	{"txn/writes-and-reads-inside", []*pb.InternalRaftRequest{put("a", "1"),
		txn(cmps(cmp("a", "", cValue, eq, "1")), ops(put("a", "2", withPrevKV), get("a", ""), put("b", "1"), get("a", "c"),
			del("c", "", true), get("a", "\x00", countOnly)), nil),
		txn(nil, ops(del("a", "", true), get("a", "\x00"), put("c", "1"), get("a", "\x00", countOnly)), nil),
		get("a", "\x00"), txn(nil, ops(get("a", "")), nil), get("a", ""),
		txn(nil, ops(del("zz", "", false)), nil), get("a", ""), txn(nil, ops(del("zz", "", false), put("z", "1")), nil)}},
	{"txn/nested", []*pb.InternalRaftRequest{put("a", "1"),
		txn(cmps(cmp("a", "", cValue, eq, "1")),
			ops(put("b", "1"), txn(cmps(cmp("b", "", cVersion, eq, 0)), ops(put("c", "then"), get("b", "")), ops(put("c", "else")))),
			ops(put("d", "1"))),
		get("a", "\x00"),
		txn(nil, ops(txn(nil, ops(txn(cmps(cmp("c", "", cValue, eq, "then")), ops(get("c", "")), nil)), nil)), nil),
		txn(nil, ops(txn(nil, ops(put("e", "1")), ops(put("e", "2"))), put("f", "1")), nil)}},
	{"txn/refused-changes-nothing", []*pb.InternalRaftRequest{put("a", "1"),
		txn(nil, ops(put("b", "1"), put("c", "1", withLease(5))), nil), get("a", "\x00"),
		txn(nil, ops(put("b", "1"), get("a", "", atRev(50))), nil), get("a", "\x00"),
		txn(nil, ops(put("b", "1"), put("zz", "", ignoreValue)), nil), get("a", "\x00"),
		txn(cmps(cmp("a", "", cValue, eq, "nope")), ops(put("b", "1", withLease(5))), ops(put("b", "2"))), get("b", "")}},
	{"txn/bad-input", []*pb.InternalRaftRequest{put("a", "1"),
		txn(nil, ops(put("b", "1"), put("b", "2")), nil),
		txn(nil, ops(put("b", "1"), del("b", "", false)), nil),
		txn(nil, ops(del("a", "c", false), put("b", "1")), nil),
		txn(nil, ops(del("a", "\x00", false), put("b", "1")), nil),
		txn(nil, ops(put("b", "1")), ops(put("b", "1"))),
		txn(nil, ops(txn(nil, ops(put("b", "1")), ops(put("b", "2"))), put("b", "3")), nil),
		txn(nil, ops(txn(nil, ops(del("b", "", false)), nil), put("b", "3")), nil),
		txn(nil, ops(txn(nil, ops(put("b", "1")), nil), txn(nil, ops(put("b", "2")), nil)), nil),
		txn(nil, ops(nil), nil),
		txn(cmps(cmp("", "", cValue, eq, "")), nil, nil),
		txn(nil, ops(get("", "")), nil),
		txn(nil, ops(put("", "1")), nil),
		txn(nil, ops(put("k", "v", ignoreValue)), nil),
		get("a", "\x00")}},
	{"txn/too-many-ops", []*pb.InternalRaftRequest{
		txn(nil, manyPuts(128), nil), txn(nil, manyPuts(129), nil), txn(nil, nil, manyPuts(129)),
		txn(manyCompares(129), nil, nil), txn(manyCompares(100), manyPuts(10), nil),
		txn(nil, ops(txn(nil, manyPuts(128), nil)), nil), txn(nil, ops(txn(nil, manyPuts(127), nil)), nil),
		get("k", "\x00", countOnly)}},

	{"compact/keeps-newest-at-rev", []*pb.InternalRaftRequest{put("a", "1"), put("a", "2"), put("b", "1"), put("a", "3"),
		del("b", "", false), put("c", "1"), compact(5), get("a", "", atRev(4)), get("a", "", atRev(5)), get("a", "\x00", atRev(5)),
		get("b", "", atRev(6)), get("a", "\x00"), compact(5), compact(4), compact(8), compact(7), get("a", "\x00", atRev(6)),
		get("a", "\x00", atRev(7)), del("c", "", false), compact(8), get("a", "\x00", atRev(8)), get("c", "", atRev(8))}},
	{"compact/then-write", []*pb.InternalRaftRequest{put("a", "1"), put("a", "2"), compact(3), put("a", "3", withPrevKV),
		txn(cmps(cmp("a", "", cVersion, eq, 3)), ops(get("a", "", atRev(2))), nil), txn(nil, ops(get("a", "", atRev(3))), nil),
		get("a", "", atRev(3))}},

	{"lease/grant-revoke", []*pb.InternalRaftRequest{grant(1, 1), grant(2, 100), grant(1, 5), grant(3, 9000000001),
		put("a", "1", withLease(2)), put("b", "1", withLease(2)), put("c", "1", withLease(2)), put("c", "2"),
		put("d", "1", withLease(1)), put("d", "2", withLease(2)), revoke(2), get("a", "\x00"), revoke(2), revoke(1),
		get("a", "\x00"), grant(4, 10), revoke(4), get("a", "\x00"), put("e", "1", withLease(4))}},
	{"lease/revoke-in-one-revision", []*pb.InternalRaftRequest{grant(9, 60), put("x", "1", withLease(9)), put("y", "1", withLease(9)),
		put("z", "1", withLease(9)), txn(nil, ops(put("w", "1", withLease(9)), put("v", "1")), nil), revoke(9),
		get("a", "\x00"), get("v", "", atRev(5))}},
}

func manyPuts(n int) []*pb.RequestOp {
	reqs := make([]*pb.InternalRaftRequest, n)
	for i := range reqs {
		reqs[i] = put("k"+strings.Repeat("x", i), "v")
	}
	return ops(reqs...)
}

func manyCompares(n int) []*pb.Compare {
	out := make([]*pb.Compare, n)
	for i := range out {
		out[i] = cmp("k", "", cVersion, eq, 0)
	}
	return out
}

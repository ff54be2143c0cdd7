package watchhub

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/obs"
)

// metrics are the hub's Prometheus metrics, on its own registry (with the Go runtime's, so memory per
// watcher is go_memstats_heap_inuse_bytes over cairn_watchhub_watchers): etcd's watch series (etcd v3.7's
// etcd_debugging_mvcc_{watch_stream,watcher,slow_watcher,events}_total, which etcd's MVCC serves) and Cairn's own.
type metrics struct {
	registry *prometheus.Registry

	head              prometheus.Gauge
	windowRevisions   prometheus.Gauge
	windowBytes       prometheus.Gauge
	streams           prometheus.Gauge
	groups            prometheus.Gauge
	watchers          [numWatcherStates]prometheus.Gauge
	watcherTotal      prometheus.Gauge // etcd's: every registered watcher
	slowWatchers      prometheus.Gauge // etcd's: unsynced watchers, here those catching up
	busRecords        *prometheus.CounterVec
	fills             prometheus.Counter
	fillErrors        prometheus.Counter
	filledRevisions   prometheus.Counter
	encodedResponses  prometheus.Counter
	responsesSent     prometheus.Counter
	eventsSent        prometheus.Counter
	fellBehind        prometheus.Counter
	compactedWatchers prometheus.Counter
	deliveryLatency   *obs.BatchedHistogram // observed by each stream's sender through its sendStats
	lag               lagMetrics
}

func newMetrics(registry *prometheus.Registry) *metrics {
	if registry == nil {
		registry = obs.NewRegistry()
	}
	m := &metrics{registry: registry}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "watchhub", Name: name, Help: help})
		m.registry.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "watchhub", Name: name, Help: help})
		m.registry.MustRegister(c)
		return c
	}
	m.head = gauge("head_revision", "The last revision the hub has, contiguously.")
	m.windowRevisions = gauge("window_revisions", "Revisions held in the in-memory window.")
	m.windowBytes = gauge("window_bytes", "Bytes of events held in the in-memory window.")
	etcdGauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: name, Help: help})
		m.registry.MustRegister(g)
		return g
	}
	m.streams = etcdGauge("watch_stream_total", "Total number of watch streams.")
	m.watcherTotal = etcdGauge("watcher_total", "Total number of watchers.")
	m.slowWatchers = etcdGauge("slow_watcher_total", "Total number of unsynced slow watchers.")
	m.groups = gauge("groups", "Groups of synced watchers sharing one spec (one match and one encoding per event).")
	watchers := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "watchhub",
		Name: "watchers", Help: "Watchers by state."}, []string{"state"})
	m.registry.MustRegister(watchers)
	for s := stateSynced; s < numWatcherStates; s++ {
		m.watchers[s] = watchers.WithLabelValues(s.String())
	}
	m.busRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "watchhub",
		Name: "bus_records_total", Help: "Records with events from the bus, by what became of them."}, []string{"result"})
	m.registry.MustRegister(m.busRecords)
	m.fills = counter("history_fills_total", "Reads of storage history for revisions the bus did not deliver.")
	m.fillErrors = counter("history_fill_errors_total", "Failed reads of storage history for missing revisions.")
	m.filledRevisions = counter("filled_revisions_total", "Revisions delivered from storage history instead of the bus.")
	m.encodedResponses = counter("encoded_responses_total", "Live responses encoded (once per group and revision).")
	m.responsesSent = counter("responses_sent_total", "Watch responses written to clients.")
	m.eventsSent = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "mvcc",
		Name: "events_total", Help: "Total number of events sent by this member."})
	m.registry.MustRegister(m.eventsSent)
	m.fellBehind = counter("watchers_fell_behind_total", "Times a synced watcher could not be queued and moved to catch-up.")
	m.compactedWatchers = counter("watchers_compacted_total", "Watchers canceled because they needed compacted revisions.")
	m.deliveryLatency = obs.NewBatchedHistogram(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "watchhub",
		Name: "delivery_latency_seconds", Help: "From a revision's arrival at the hub to a live response written.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)})
	m.registry.MustRegister(m.deliveryLatency)
	m.lag = newLagMetrics(m.registry)
	return m
}

// sendStats are one sender's counts for the hub's metrics, added to them when it pauses (flush), so that writing
// a response costs the sender no atomic operation on a line every sender shares: with thousands of responses a
// second per stream, those were a fifth of a hub's CPU, and contended more as cores were added. A response's
// delivery latency waits in unstamped until the sender reads the clock after a run of writes (stamp): one clock
// read per run, not one per response (with 100 watchers of a key on a stream, reading the clock for each write
// was a sixth of a hub's CPU). Sender only.
type sendStats struct {
	responses, events int
	latency, lag      obs.HistogramBatch
	unstamped         []arrivals // live responses written since the last stamp, by arrival
	flushedAt         time.Time  // when the counts were last added to the metrics
}

// arrivals are n responses written whose revisions arrived at the hub at the same time.
type arrivals struct {
	at time.Time
	n  int
}

// maxUnstamped bounds sendStats.unstamped: a run of frames whose merged responses arrived at many times (a
// stream that fell behind) is stamped early, every maxUnstamped arrivals, so a sender keeps at most 2 KiB
// for it; the common run (many watchers of one revision) is one entry.
const maxUnstamped = 64

func (m *metrics) newSendStats() sendStats {
	return sendStats{latency: m.deliveryLatency.NewBatch(), lag: m.lag.observed.NewBatch()}
}

// sent counts responses written; received is when a live response's revision arrived (zero otherwise), and its
// delivery latency runs to the next stamp.
func (st *sendStats) sent(responses, events int, received time.Time) {
	st.responses += responses
	st.events += events
	if received.IsZero() {
		return
	}
	if n := len(st.unstamped); n > 0 && st.unstamped[n-1].at.Equal(received) {
		st.unstamped[n-1].n++
		return
	}
	if len(st.unstamped) == maxUnstamped { // every one of them is written: stamp them now
		st.stamp(time.Now())
	}
	st.unstamped = append(st.unstamped, arrivals{at: received, n: 1})
}

// stamp ends the delivery latency of the responses sent since the last stamp at written.
func (st *sendStats) stamp(written time.Time) {
	for _, a := range st.unstamped {
		st.latency.ObserveN(written.Sub(a.at).Seconds(), a.n)
	}
	st.unstamped = st.unstamped[:0]
}

// pending is how many observations wait for a flush.
func (st *sendStats) pending() int { return st.responses + st.lag.Len() }

// due reports whether a sender that has not paused should flush now: statsFlushEvery observations wait, or
// some have waited statsFlushInterval since the last flush.
func (st *sendStats) due(now time.Time) bool {
	n := st.pending()
	return n >= statsFlushEvery || (n > 0 && now.Sub(st.flushedAt) >= statsFlushInterval)
}

// flush adds the counts to m, stamping what is unstamped now; with nothing counted it does nothing.
func (st *sendStats) flush(m *metrics) {
	if st.pending() == 0 && st.latency.Len() == 0 && len(st.unstamped) == 0 {
		return
	}
	now := time.Now()
	if len(st.unstamped) > 0 {
		st.stamp(now)
	}
	if st.responses > 0 {
		m.responsesSent.Add(float64(st.responses))
	}
	if st.events > 0 {
		m.eventsSent.Add(float64(st.events))
	}
	st.responses, st.events = 0, 0
	st.latency.Flush()
	st.lag.Flush()
	st.flushedAt = now
}

// enterState and leaveState keep the watcher gauges as a watcher moves between states.
func (m *metrics) enterState(s watcherState) { m.moveState(s, 1) }

func (m *metrics) leaveState(s watcherState) { m.moveState(s, -1) }

func (m *metrics) moveState(s watcherState, delta float64) {
	if s == stateNone {
		return
	}
	m.watchers[s].Add(delta)
	m.watcherTotal.Add(delta)
	if s == stateCatchingUp {
		m.slowWatchers.Add(delta)
	}
}

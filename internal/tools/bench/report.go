package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Percentiles are the latency percentiles every Summary reports, as etcd's benchmark tool does.
func Percentiles() []float64 { return []float64{10, 25, 50, 75, 90, 95, 99, 99.9} }

// histogramBuckets is the number of equal-width latency buckets between fastest and slowest.
const histogramBuckets = 10

// Report collects the outcome of benchmark requests. Record may be called from many goroutines.
type Report struct {
	name string

	mu          sync.Mutex
	latencies   []time.Duration
	errorCounts map[string]int
}

// NewReport returns an empty report for the benchmark with the given name.
func NewReport(name string) *Report {
	return &Report{name: name, errorCounts: map[string]int{}}
}

// Record adds one request: its latency if err is nil, otherwise one count of err's message.
func (r *Report) Record(latency time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errorCounts[err.Error()]++
		return
	}
	r.latencies = append(r.latencies, latency)
}

// RecordLatencies adds successful samples in one step (for sources of many samples, such as a watch stream).
func (r *Report) RecordLatencies(latencies []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, latencies...)
}

// Summary computes the statistics of everything recorded so far; elapsed is the wall time of the run, over
// which requests per second are counted.
func (r *Report) Summary(elapsed time.Duration) Summary {
	r.mu.Lock()
	latencies := slices.Clone(r.latencies)
	errorCounts := maps.Clone(r.errorCounts)
	r.mu.Unlock()
	return summarize(r.name, latencies, errorCounts, elapsed)
}

// Summary is the result of one benchmark run. Durations are in seconds, as etcd prints them; the JSON form
// is what `cairn bench --output json` prints.
type Summary struct {
	Name string `json:"name"`
	// Params records how the run was configured (clients, conns, endpoints, sizes...), for comparisons.
	Params map[string]string `json:"params,omitempty"`
	// Requests counts successful requests; Errors counts failed ones, by message in ErrorCounts.
	Requests    int            `json:"requests"`
	Errors      int            `json:"errors"`
	ErrorCounts map[string]int `json:"error_counts,omitempty"`
	TotalSec    float64        `json:"total_sec"`
	// RequestsPerSec is successful requests over the run's wall time.
	RequestsPerSec float64             `json:"requests_per_sec"`
	SlowestSec     float64             `json:"slowest_sec"`
	FastestSec     float64             `json:"fastest_sec"`
	AverageSec     float64             `json:"average_sec"`
	StddevSec      float64             `json:"stddev_sec"`
	Percentiles    []PercentileLatency `json:"percentiles"`
	Histogram      []HistogramBucket   `json:"histogram"`
}

// PercentileLatency is the latency at or below which Percentile percent of successful requests finished.
type PercentileLatency struct {
	Percentile float64 `json:"percentile"`
	LatencySec float64 `json:"latency_sec"`
}

// HistogramBucket counts successful requests with a latency in (previous bucket's UpperSec, UpperSec].
type HistogramBucket struct {
	UpperSec float64 `json:"upper_sec"`
	Count    int     `json:"count"`
}

// Percentile returns the latency of percentile p (one of Percentiles()) in seconds, or 0 if absent.
func (s Summary) Percentile(p float64) float64 {
	for _, pl := range s.Percentiles {
		if pl.Percentile == p {
			return pl.LatencySec
		}
	}
	return 0
}

func summarize(name string, latencies []time.Duration, errorCounts map[string]int, elapsed time.Duration) Summary {
	s := Summary{Name: name, Requests: len(latencies), TotalSec: elapsed.Seconds()}
	for _, n := range errorCounts {
		s.Errors += n
	}
	if len(errorCounts) > 0 {
		s.ErrorCounts = errorCounts
	}
	if len(latencies) == 0 {
		return s
	}
	slices.Sort(latencies)
	seconds := make([]float64, len(latencies))
	var sum float64
	for i, latency := range latencies {
		seconds[i] = latency.Seconds()
		sum += seconds[i]
	}
	s.FastestSec, s.SlowestSec = seconds[0], seconds[len(seconds)-1]
	s.AverageSec = sum / float64(len(seconds))
	var squares float64
	for _, sec := range seconds {
		squares += (sec - s.AverageSec) * (sec - s.AverageSec)
	}
	s.StddevSec = math.Sqrt(squares / float64(len(seconds)))
	if elapsed > 0 {
		s.RequestsPerSec = float64(len(seconds)) / elapsed.Seconds()
	}
	for _, p := range Percentiles() {
		// Nearest rank: the smallest latency with at least p percent of requests at or below it.
		rank := int(math.Ceil(p / 100 * float64(len(seconds))))
		s.Percentiles = append(s.Percentiles, PercentileLatency{p, seconds[max(rank, 1)-1]})
	}
	s.Histogram = histogram(seconds)
	return s
}

// histogram splits [fastest, slowest] into equal-width buckets; the last bucket's bound is slowest itself.
func histogram(sorted []float64) []HistogramBucket {
	fastest, slowest := sorted[0], sorted[len(sorted)-1]
	width := (slowest - fastest) / histogramBuckets
	buckets := make([]HistogramBucket, histogramBuckets+1)
	for i := range histogramBuckets {
		buckets[i].UpperSec = fastest + width*float64(i)
	}
	buckets[histogramBuckets].UpperSec = slowest
	next := 0
	for _, sec := range sorted {
		for next < histogramBuckets && sec > buckets[next].UpperSec {
			next++
		}
		buckets[next].Count++
	}
	return buckets
}

// WriteText prints s in the layout of etcd's benchmark tool. precise prints full float precision (etcd's
// --precise); otherwise four decimals.
func (s Summary) WriteText(w io.Writer, precise bool) error {
	format := "%4.4f"
	if precise {
		format = "%g"
	}
	secs := func(v float64) string { return fmt.Sprintf(format+" secs", v) }
	var b strings.Builder
	if s.Requests > 0 {
		b.WriteString("\nSummary:\n")
		fmt.Fprintf(&b, "  Total:\t%s.\n", secs(s.TotalSec))
		fmt.Fprintf(&b, "  Slowest:\t%s.\n", secs(s.SlowestSec))
		fmt.Fprintf(&b, "  Fastest:\t%s.\n", secs(s.FastestSec))
		fmt.Fprintf(&b, "  Average:\t%s.\n", secs(s.AverageSec))
		fmt.Fprintf(&b, "  Stddev:\t%s.\n", secs(s.StddevSec))
		fmt.Fprintf(&b, "  Requests/sec:\t"+format+"\n", s.RequestsPerSec)
		b.WriteString("\nResponse time histogram:\n")
		mostInBucket := slices.MaxFunc(s.Histogram, func(a, b HistogramBucket) int { return cmp.Compare(a.Count, b.Count) }).Count
		for _, bucket := range s.Histogram {
			bar := strings.Repeat("∎", bucket.Count*40/max(mostInBucket, 1))
			fmt.Fprintf(&b, "  "+format+" [%d]\t|%s\n", bucket.UpperSec, bucket.Count, bar)
		}
		b.WriteString("\nLatency distribution:\n")
		for _, pl := range s.Percentiles {
			fmt.Fprintf(&b, "  %v%% in %s.\n", pl.Percentile, secs(pl.LatencySec))
		}
	}
	if s.Errors > 0 {
		b.WriteString("\nError distribution:\n")
		messages := slices.Sorted(maps.Keys(s.ErrorCounts))
		for _, message := range messages {
			fmt.Fprintf(&b, "  [%d]\t%s\n", s.ErrorCounts[message], message)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

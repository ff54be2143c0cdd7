package obs

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Observers is a histogram with two labels whose children are kept once looked up, so a hot path (one
// observation per request) skips WithLabelValues' label checks, hashing and lock. The label values must be of
// bounded cardinality (method and code, request type and code).
type Observers struct {
	vec      *prometheus.HistogramVec
	children sync.Map // [2]string -> prometheus.Observer
}

// NewObservers wraps vec, which has exactly two labels.
func NewObservers(vec *prometheus.HistogramVec) *Observers { return &Observers{vec: vec} }

// Observe records v under the label values a and b.
func (o *Observers) Observe(a, b string, v float64) {
	key := [2]string{a, b}
	child, ok := o.children.Load(key)
	if !ok {
		child, _ = o.children.LoadOrStore(key, o.vec.WithLabelValues(a, b))
	}
	child.(prometheus.Observer).Observe(v)
}

// Vec is the histogram, for registering.
func (o *Observers) Vec() *prometheus.HistogramVec { return o.vec }

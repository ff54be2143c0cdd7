package obs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestObserversKeepEachLabelPairApart(t *testing.T) {
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "t_seconds", Help: "t"}, []string{"method", "code"})
	o := NewObservers(vec)
	observations := []struct {
		method, code string
		v            float64
	}{
		{"Put", "OK", 1}, {"Put", "OK", 2}, {"Put", "Unavailable", 4}, {"Range", "OK", 8},
	}
	for _, ob := range observations {
		o.Observe(ob.method, ob.code, ob.v)
	}
	tests := []struct {
		method, code string
		count        uint64
		sum          float64
	}{
		{"Put", "OK", 2, 3}, {"Put", "Unavailable", 1, 4}, {"Range", "OK", 1, 8}, {"Range", "Unavailable", 0, 0},
	}
	for _, tt := range tests {
		var m dto.Metric
		if err := vec.WithLabelValues(tt.method, tt.code).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetHistogram(); got.GetSampleCount() != tt.count || got.GetSampleSum() != tt.sum {
			t.Errorf("%s %s: count %d sum %v, want %d and %v", tt.method, tt.code, got.GetSampleCount(), got.GetSampleSum(), tt.count, tt.sum)
		}
	}
	if o.Vec() != vec {
		t.Error("Vec is not the wrapped histogram")
	}
}

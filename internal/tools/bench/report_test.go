package bench

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestSummaryStatistics(t *testing.T) {
	t.Parallel()
	oneToTen := make([]time.Duration, 10)
	for i := range oneToTen {
		oneToTen[i] = ms(float64(10 - i)) // recorded out of order on purpose
	}
	tests := []struct {
		name            string
		latencies       []time.Duration
		errs            []error
		elapsed         time.Duration
		wantRequests    int
		wantErrors      int
		wantRPS         float64
		wantFastest     float64
		wantSlowest     float64
		wantAverage     float64
		wantStddev      float64
		wantPercentiles map[float64]float64
		wantFirstBucket int
	}{
		{
			name: "one to ten ms", latencies: oneToTen, elapsed: 2 * time.Second,
			wantRequests: 10, wantRPS: 5, wantFastest: 0.001, wantSlowest: 0.010, wantAverage: 0.0055,
			wantStddev:      math.Sqrt(8.25) / 1000,
			wantPercentiles: map[float64]float64{10: 0.001, 25: 0.003, 50: 0.005, 75: 0.008, 90: 0.009, 95: 0.010, 99.9: 0.010},
			wantFirstBucket: 1,
		},
		{
			name: "identical latencies", latencies: []time.Duration{ms(2), ms(2), ms(2), ms(2)}, elapsed: time.Second,
			wantRequests: 4, wantRPS: 4, wantFastest: 0.002, wantSlowest: 0.002, wantAverage: 0.002,
			wantPercentiles: map[float64]float64{10: 0.002, 99.9: 0.002}, wantFirstBucket: 4,
		},
		{
			name: "errors are not latencies", latencies: []time.Duration{ms(4)},
			errs:    []error{errors.New("boom"), errors.New("boom"), errors.New("etcdserver: request timed out")},
			elapsed: time.Second, wantRequests: 1, wantErrors: 3, wantRPS: 1, wantFastest: 0.004, wantSlowest: 0.004,
			wantAverage: 0.004, wantPercentiles: map[float64]float64{50: 0.004}, wantFirstBucket: 1,
		},
		{
			name: "only errors", errs: []error{errors.New("boom")}, elapsed: time.Second, wantErrors: 1,
		},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			report := NewReport("put")
			for _, latency := range tt.latencies {
				report.Record(latency, nil)
			}
			for _, err := range tt.errs {
				report.Record(time.Hour, err)
			}
			s := report.Summary(tt.elapsed)
			if s.Requests != tt.wantRequests || s.Errors != tt.wantErrors {
				t.Fatalf("requests %d errors %d, want %d %d", s.Requests, s.Errors, tt.wantRequests, tt.wantErrors)
			}
			for what, got := range map[string][2]float64{
				"rps": {s.RequestsPerSec, tt.wantRPS}, "fastest": {s.FastestSec, tt.wantFastest},
				"slowest": {s.SlowestSec, tt.wantSlowest}, "average": {s.AverageSec, tt.wantAverage},
				"stddev": {s.StddevSec, tt.wantStddev}, "total": {s.TotalSec, tt.elapsed.Seconds()},
			} {
				if !near(got[0], got[1]) {
					t.Errorf("%s = %v, want %v", what, got[0], got[1])
				}
			}
			for p, want := range tt.wantPercentiles {
				if got := s.Percentile(p); !near(got, want) {
					t.Errorf("p%v = %v, want %v", p, got, want)
				}
			}
			if tt.wantRequests == 0 {
				if len(s.Percentiles) != 0 || len(s.Histogram) != 0 {
					t.Errorf("no successes, yet percentiles %v histogram %v", s.Percentiles, s.Histogram)
				}
				return
			}
			if len(s.Percentiles) != len(Percentiles()) || len(s.Histogram) != histogramBuckets+1 {
				t.Fatalf("%d percentiles, %d buckets", len(s.Percentiles), len(s.Histogram))
			}
			counted := 0
			for _, bucket := range s.Histogram {
				counted += bucket.Count
			}
			if counted != s.Requests || s.Histogram[0].Count != tt.wantFirstBucket || !near(s.Histogram[histogramBuckets].UpperSec, s.SlowestSec) {
				t.Errorf("histogram %+v: counted %d, first bucket %d (want %d)", s.Histogram, counted, s.Histogram[0].Count, tt.wantFirstBucket)
			}
		})
	}
}

func TestSummaryOutputs(t *testing.T) {
	t.Parallel()
	report := NewReport("range")
	for i := 1; i <= 10; i++ {
		report.Record(ms(float64(i)), nil)
	}
	report.Record(0, errors.New("boom"))
	report.Record(0, errors.New("boom"))
	s := report.Summary(2 * time.Second)
	s.Params = map[string]string{"clients": "1"}

	var text strings.Builder
	if err := s.WriteText(&text, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nSummary:\n", "  Total:\t2.0000 secs.\n", "  Slowest:\t0.0100 secs.\n", "  Fastest:\t0.0010 secs.\n",
		"  Average:\t0.0055 secs.\n", "  Requests/sec:\t5.0000\n", "\nResponse time histogram:\n",
		"  0.0100 [1]\t|∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎\n", "\nLatency distribution:\n",
		"  50% in 0.0050 secs.\n", "  99.9% in 0.0100 secs.\n", "\nError distribution:\n", "  [2]\tboom\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	var precise strings.Builder
	s.WriteText(&precise, true)
	if !strings.Contains(precise.String(), "  Average:\t0.0055 secs.") || !strings.Contains(precise.String(), "Total:\t2 secs.") {
		t.Errorf("precise output:\n%s", precise.String())
	}

	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("JSON round trip changed the summary:\n%+v\n%+v", s, back)
	}
	for _, field := range []string{`"requests_per_sec":5`, `"percentile":99.9`, `"error_counts":{"boom":2}`, `"params":{"clients":"1"}`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("JSON lacks %s: %s", field, raw)
		}
	}
}

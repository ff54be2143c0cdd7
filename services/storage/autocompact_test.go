package storage

import (
	"testing"
	"time"
)

func TestAutoCompactionConfig(t *testing.T) {
	tests := []struct {
		mode, retention string
		wantMode        string
		want            time.Duration
		wantErr         bool
	}{
		{mode: "periodic", retention: "0", wantMode: "periodic", want: 0},
		{mode: "periodic", retention: "1", wantMode: "periodic", want: time.Hour}, // an integer is hours
		{mode: "periodic", retention: "90m", wantMode: "periodic", want: 90 * time.Minute},
		{mode: "revision", retention: "1000", wantMode: "revision", want: 1000},
		{mode: "revision", retention: "1h", wantErr: true},
		{mode: "periodic", retention: "soon", wantErr: true},
		{mode: "periodic", retention: "-5m", wantErr: true},
		{mode: "hourly", retention: "1", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.mode+"="+tc.retention, func(t *testing.T) {
			cfg := Config{AutoCompactionMode: tc.mode, AutoCompactionRetention: tc.retention}
			mode, retention, err := cfg.autoCompaction()
			if (err != nil) != tc.wantErr || mode != tc.wantMode || retention != tc.want {
				t.Fatalf("got %q %v %v, want %q %v error %v", mode, retention, err, tc.wantMode, tc.want, tc.wantErr)
			}
		})
	}
}

// TestPeriodicCompactor replays etcd's Periodic with a 10-minute period (samples every minute): nothing is
// compacted during the first period, then the revision seen one period ago, then every period.
func TestPeriodicCompactor(t *testing.T) {
	start := time.Unix(0, 0)
	p := newPeriodicCompactor(10*time.Minute, start)
	if p.retryInterval() != time.Minute {
		t.Fatalf("retry interval %v", p.retryInterval())
	}
	var compactions []int64
	for minute := 1; minute <= 30; minute++ {
		p.sample(int64(100 * minute)) // revision 100 per minute, sampled at the start of each interval
		now := start.Add(time.Duration(minute) * time.Minute)
		if rev, ok := p.due(now); ok {
			compactions = append(compactions, rev)
			p.compacted(rev, now)
		}
	}
	// At minute 10 the oldest sample is the first (revision 100); later the oldest of the 11 kept, taken one
	// period and one interval before (revision 1000 at minute 20, 2000 at minute 30).
	want := []int64{100, 1000, 2000}
	if len(compactions) != len(want) {
		t.Fatalf("compacted to %v, want %v", compactions, want)
	}
	for i := range want {
		if compactions[i] != want[i] {
			t.Fatalf("compacted to %v, want %v", compactions, want)
		}
	}

	// A period longer than an hour samples every 6 minutes and compacts hourly.
	long := newPeriodicCompactor(24*time.Hour, start)
	if long.retryInterval() != 6*time.Minute || long.compactInterval != time.Hour || long.retentions != 241 {
		t.Fatalf("24h period: retry %v, compact %v, retentions %d", long.retryInterval(), long.compactInterval, long.retentions)
	}
}

package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestEtcdTuningFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    map[string][]string // each service's extra arguments
		wantErr string              // etcd's words
	}{
		{"defaults pass nothing", nil, map[string][]string{}, ""},
		{"raft timing goes to consensus", []string{"--heartbeat-interval", "50", "--election-timeout", "500", "--snapshot-count", "1000"},
			map[string][]string{"consensus": {"--heartbeat-interval", "50", "--election-timeout", "500", "--snapshot-count", "1000"}}, ""},
		{"request limits go to every checker", []string{"--max-request-bytes=2097152", "--max-txn-ops=256", "--quota-backend-bytes=1073741824"},
			map[string][]string{
				"consensus": {"--max-request-bytes", "2097152"},
				"storage":   {"--quota-backend-bytes", "1073741824", "--max-request-bytes", "2097152", "--max-txn-ops", "256"},
				"frontend":  {"--max-request-bytes", "2097152", "--max-txn-ops", "256"},
				"watchhub":  {"--max-request-bytes", "2097152"},
			}, ""},
		{"the lag bound goes to the watchhubs", []string{"--max-watch-lag", "2s"},
			map[string][]string{"watchhub": {"--max-watch-lag", "2s"}}, ""},
		{"zero lag bound", []string{"--max-watch-lag", "0"}, nil, "--max-watch-lag must be positive"},
		{"election under 5 heartbeats", []string{"--heartbeat-interval", "100", "--election-timeout", "400"}, nil,
			"--election-timeout[400ms] should be at least as 5 times as --heartbeat-interval[100ms]"},
		{"election too long", []string{"--election-timeout", "60000"}, nil,
			"--election-timeout[60000ms] is too long, and should be set less than 50000ms"},
		{"zero heartbeat", []string{"--heartbeat-interval", "0"}, nil, "--heartbeat-interval must be >0 (set to 0ms)"},
		{"zero snapshot count", []string{"--snapshot-count", "0"}, nil, "--snapshot-count must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tuning etcdTuning
			flags := pflag.NewFlagSet("up", pflag.ContinueOnError)
			tuning.registerRaft(flags)
			tuning.registerAPI(flags)
			tuning.registerWatch(flags)
			if err := flags.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := tuning.validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("validate = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := tuning.childArgs(flags)
			if !maps.EqualFunc(got, tt.want, slices.Equal) {
				t.Fatalf("child args = %v, want %v", got, tt.want)
			}
		})
	}
}

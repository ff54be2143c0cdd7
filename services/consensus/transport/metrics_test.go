package transport

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3/raftpb"
)

// TestHeartbeatSendFailures: as etcd's leader does, a heartbeat queued more than two heartbeat intervals after
// the previous one to the same peer counts as a send failure, a dropped one too; the first after a leadership
// change does not, nor does any other message.
func TestHeartbeatSendFailures(t *testing.T) {
	const interval = 5 * time.Millisecond
	heartbeat := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum()}
	appendMsg := &raftpb.Message{Type: raftpb.MsgApp.Enum()}
	metrics, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	series := &peerSeries{metrics: metrics}
	peer := series.of(2)
	start := time.Unix(1000, 0)
	sendAt := func(m *raftpb.Message, after time.Duration) func() {
		return func() { peer.sent(m, interval, start.Add(after)) }
	}
	steps := []struct {
		name string
		do   func()
		want float64
	}{
		{"first heartbeat", sendAt(heartbeat, 0), 0},
		{"on time", sendAt(heartbeat, interval), 0},
		{"two intervals later", sendAt(heartbeat, 3*interval), 0},
		{"an append long after", sendAt(appendMsg, 10*interval), 0},
		{"late", sendAt(heartbeat, 6*interval), 1},
		{"leadership changes", series.resetHeartbeats, 1},
		{"first after it", sendAt(heartbeat, 20*interval), 1},
		{"dropped", func() { peer.dropped(heartbeat) }, 2},
		{"dropped append", func() { peer.dropped(appendMsg) }, 2},
	}
	for _, step := range steps {
		step.do()
		if got := testutil.ToFloat64(metrics.heartbeatFailures); got != step.want {
			t.Fatalf("after %q: heartbeat send failures = %v, want %v", step.name, got, step.want)
		}
	}
	if got := testutil.ToFloat64(peer.sentFailures); got != 2 {
		t.Errorf("peer sent failures = %v, want 2 (the dropped heartbeat and append)", got)
	}
}

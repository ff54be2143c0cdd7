package progress

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// lockedBuffer is written by the Meter's goroutine and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMeter(t *testing.T) {
	tests := []struct {
		name     string
		terminal bool
		check    func(t *testing.T, out string)
	}{
		{"a file or a pipe gets plain lines", false, func(t *testing.T, out string) {
			if strings.Contains(out, "\r") {
				t.Fatalf("carriage returns in a file: %q", out)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) < 3 || lines[len(lines)-1] != "done 3" {
				t.Fatalf("lines %q: want at least two progress lines and the final state", lines)
			}
		}},
		{"a terminal gets one line redrawn", true, func(t *testing.T, out string) {
			if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\r\033[Kdone 3\n") || strings.Count(out, "\r") < 3 {
				t.Fatalf("terminal output %q: want redraws in place and one final line", out)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out lockedBuffer
			var step atomic.Int64
			m := start(&out, tt.terminal, time.Millisecond, func() string {
				if step.Load() == 3 {
					return "done 3"
				}
				return "step " + string(rune('0'+step.Load()))
			})
			waittest.Until(t, 5*time.Second, time.Millisecond, "two prints", func() bool {
				return strings.Count(out.String(), "step 0") >= 2
			})
			step.Store(3)
			m.Stop()
			m.Stop()
			tt.check(t, out.String())
		})
	}
}

func TestNilOutPrintsNothing(t *testing.T) {
	m := Start(nil, func() string { t.Fatal("status called without an output"); return "" })
	m.Stop()
}

func TestABufferIsNotATerminal(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a bytes.Buffer counted as a terminal")
	}
}

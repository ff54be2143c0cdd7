package eventbus

import (
	"fmt"
	"os"
	"testing"
)

// samplerPathAtStart is the sampler's path as the package's init left it, before a test stopped it: a second
// run of TestStopProcessSampler in the same process (-count) finds the sampler stopped by the first.
var samplerPathAtStart = procStatFile

func TestStopProcessSampler(t *testing.T) {
	if raceDetector {
		t.Skip("StopProcessSampler leaves the sampler running under the race detector")
	}
	want := fmt.Sprintf("/proc/%d/stat", os.Getpid())
	if samplerPathAtStart != want {
		t.Fatalf("nats-server's sampler reads %q, want %q: its pse package changed, see sampler.go", samplerPathAtStart, want)
	}
	if procStatFile == samplerPathAtStart && processSamplerStopped() {
		t.Fatal("the sampler's file cannot be read before StopProcessSampler")
	}
	StopProcessSampler()
	if !processSamplerStopped() {
		t.Fatalf("the sampler's file %q can still be read after StopProcessSampler", procStatFile)
	}
	if len(procStatFile) != len(want) {
		t.Fatalf("the sampler's path is %d bytes, want %d (the same length as before)", len(procStatFile), len(want))
	}
}

func TestUnreadablePath(t *testing.T) {
	for _, n := range []int{11, 12, 16, 20} {
		path := unreadablePath(n)
		if len(path) != n {
			t.Errorf("unreadablePath(%d) = %q, %d bytes", n, path, len(path))
		}
		if _, err := os.ReadFile(path); err == nil {
			t.Errorf("unreadablePath(%d) = %q can be read", n, path)
		}
	}
}

// processSamplerStopped reports whether the sampler's next read fails, so it no longer samples.
func processSamplerStopped() bool {
	_, err := os.ReadFile(procStatFile)
	return err != nil
}

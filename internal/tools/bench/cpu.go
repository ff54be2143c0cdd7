package bench

import (
	"syscall"
	"time"
)

// ProcessCPU is the user and system CPU time this process has used, for CPU-per-operation figures of
// in-process benchmarks.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

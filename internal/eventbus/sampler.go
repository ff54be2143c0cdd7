package eventbus

import (
	"strings"
	_ "unsafe" // for go:linkname

	_ "github.com/nats-io/nats-server/v2/server/pse" // the sampler StopProcessSampler stops
)

// procStatFile is the file nats-server's process sampler reads (its pse package's procStatFile,
// "/proc/<pid>/stat"). The sampler starts in the package's init, so it runs in every process that links
// nats-server, which is every cairn subcommand: it reads the file once a second to keep nats-server's /varz CPU
// figure current, and stops for good the first time the read fails.
//
//go:linkname procStatFile github.com/nats-io/nats-server/v2/server/pse.procStatFile
var procStatFile string

// StopProcessSampler stops nats-server's process sampler in a process that runs no NATS server. Idle, the
// sampler is one of the few things that wake such a process: measured on a bare Go process, 6 wakeups and about
// 13 ms of CPU per 30 s, and a cairn up runs 14 processes that need none of it. It points the sampler at a path
// that cannot be read, of the same length, so that the sampler's goroutine, which may read the path at the same
// moment, sees either the old path or the new one, never a mix of the two.
//
// That write is unsynchronized with the sampler's reads (nats-server offers no way to stop it), so the race
// detector reports it; in a -race build (tests) StopProcessSampler leaves the sampler running.
func StopProcessSampler() {
	if raceDetector {
		return
	}
	procStatFile = unreadablePath(len(procStatFile))
}

// unreadablePath returns a path of n bytes (n ≥ 11) under /dev/null, which is not a directory.
func unreadablePath(n int) string {
	const prefix = "/dev/null/"
	return prefix + strings.Repeat("x", max(1, n-len(prefix)))
}

// Package gctune gives a Cairn process a soft memory limit that yields to its live heap, and a GOGC that
// follows its allocation rate.
//
// The collector's target percentage (GOGC, --gc-percent) trades memory for CPU in proportion to the live
// heap: at 400 a storage holding 12 MiB of live data lets its heap reach 60 MiB between collections. A soft
// memory limit (runtime/debug.SetMemoryLimit, GOMEMLIMIT) caps that growth while the heap is small, so a
// process keeps GOGC's rare collections as long as it stays under the limit and pays with more collections
// only when it would not. A fixed limit, though, is a trap when the live heap grows towards it: the runtime
// then collects back to back (up to half the CPU) and a member holding a large key index would thrash.
//
// So the limit a Tuner sets is guarded from below: after every collection it raises the runtime's limit to
// what a GOGC of MinGCPercent would let the process reach (its memory outside the heap, plus the live heap
// times 1+MinGCPercent/100), and lowers it back to the configured limit once the live heap shrinks. The heap
// goal is thus GOGC's while the process fits the limit, never less than MinGCPercent's, and the limit's in
// between.
//
// A Tuner also paces a process that allocates slowly, through its GOGC. GOGC's goal never falls below a
// minimum heap (4 MiB times GOGC/100: 16 MiB at 400), and Go forces a collection only every two minutes once
// one has run, so an idle process fills that minimum over minutes and keeps it: an idle `cairn up` went from
// about 105 MiB of PSS at 30 s to 170-210 MiB from 5 minutes on. So after every collection GOGC is set to what
// the process allocated in AllocWindow (30 s) at the last cycle's rate, in percent of its live heap, between
// MinPacePercent (25) and the GOGC it had at Start. An idle process then runs at GOGC 25, so its heap stays
// within a quarter of its live size (1 MiB at least), and collects about every AllocWindow at most (it
// allocates a quarter of its live heap in that time or less) or when the forced collection comes; under load
// what it allocates in 30 s is many times its live heap, and it keeps its GOGC. The limit is not the lever for
// this: lowered under memory the process still maps, it makes the runtime collect back to back until the
// scavenger has returned that memory.
//
// A Tuner needs only the Go runtime: its work runs once after each collection, on the runtime's cleanup
// goroutine (runtime.AddCleanup on a sentinel it re-arms), so an idle process wakes it no more than it
// collects. Stop restores the limit and GOGC the process had.
//
// Lifecycle: New(cfg) → Start (sets the limit, arms the first sentinel) → Stop (restores the limit the runtime
// had; safe twice). The runtime's limit is the process's, so a process runs one Tuner: cmd/cairn starts it
// in every subcommand, with --memory-limit-mib as its Limit.
package gctune

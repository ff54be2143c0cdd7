//go:build race

package wal

// raceEnabled: the race detector's runtime makes allocations of its own, so allocation counts are not checked.
const raceEnabled = true

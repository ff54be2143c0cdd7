// Package pace is the one "stretch while steady" rule of Cairn's periodic jobs that watch something (a
// frontend's probe rounds, a watchhub's storage polls, a standby leasekeeper's looks at the claim): run at the
// base period while what the job watches changes, and, while it stands still, wait twice as long each time, up
// to a longest wait.
//
// Promises:
//   - A wait is never shorter than the base period nor longer than the longest wait in force (the base when the
//     longest is below it).
//   - The first run after a change, and every run the caller does not call steady, waits the base period: a
//     stretched job snaps back at once, so a stretch only ever delays noticing a change that has not been seen
//     yet, by at most the longest wait.
//   - It is pure: no clock and no timer. The caller owns its timer and resets it with the wait Next returns, so
//     the rule is tested without time.
//
// A Stretch is not safe for concurrent use: one job's goroutine owns it.
package pace

package leasekeeper

import (
	"time"

	"github.com/cairn-kv/cairn/internal/pace"
)

// standbyStretch bounds how far a standby's look at the holder stretches while the holder answers that it is
// active: RenewInterval times this (600 ms by default).
//
// Why it is safe, and how far. The standby's wait never keeps a lease safe (a new keeper counts the old one as
// serving until ActiveTimeout after its own claim, however soon it claimed); it only decides how soon a standby
// notices a holder whose process is gone. After a kill -9 the next look finds no peer is the holder and claims at
// once, so the takeover comes at most one stretched wait (plus a dial) after the crash instead of one
// RenewInterval: an abandoned lease lives about TTL + 1.8 s after its last keep-alive at worst instead of TTL +
// 1.4 s, well within the TTL + 3 s bound (see the package doc). Anything but a live answer (a timeout, a lapsed
// or unknown holder, a changed claim) brings the next look back to RenewInterval.
const standbyStretch = 3

// newStandbyPace spaces a standby's looks at the claim (internal/pace's rule): RenewInterval after a look that
// did not find the holder active (Next(false)), and otherwise twice the last wait, up to standbyStretch times
// RenewInterval (Next(true) when a peer answered that the holder is active). An idle standby so asks its peers
// about 1.7 times a second instead of 5.
func newStandbyPace(renewInterval time.Duration) *pace.Stretch {
	return pace.New(renewInterval, standbyStretch*renewInterval)
}

// Package keeperclaim is the election of the active leasekeeper, as the store itself keeps it, and the errors
// of its fencing.
//
// The state (storagepb.KeeperState: holder, epoch, renewals) lives in every member's MVCC store and changes only
// by KeeperClaim log entries, so it is the same on every member. Apply is the one rule that changes it:
// compare-and-swap on the epoch (and, for a takeover, on the renewal count), so of several standbys that look at
// the same state and claim, exactly one wins, and a claimant never wins against a holder that renewed after the
// claimant looked.
//
// Fencing: every lease revoke and checkpoint a keeper proposes carries its epoch (storagepb.Entry.keeper_epoch);
// storage refuses one whose epoch is not the stored one with ErrStaleEpoch, so a keeper that lost the role (paused,
// partitioned, restarted with old state) cannot revoke or checkpoint anything.
//
// Renewals are one way for a holder to show it is alive; a leasekeeper with peers holds the claim without them
// (it confirms it with linearizable reads, and the standbys ask it over gRPC), and the compare-and-swap works the
// same: a takeover still names the epoch and renewal count it saw.
//
// Time is not part of the state (a state machine must be deterministic): a standby measures, on its own clock,
// how long it has seen no renewal, and claims after its takeover timeout; the holder stops serving once its last
// successful renewal is older than its own, shorter, active timeout.
//
// ErrNotActive is what a standby keeper answers client calls with; the frontend moves on to the next keeper when
// it sees it (IsNotActive).
package keeperclaim

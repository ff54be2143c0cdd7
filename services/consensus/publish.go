package consensus

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-kv/cairn/api/consensuspb"
)

// publishAttributes announces this member's name, client URLs and storage URL to the cluster through
// raft, as etcd's publish does, retrying until they are in the membership or the member stops.
func (n *Node) publishAttributes() {
	want := &consensuspb.Member{
		Id: n.memberID, Name: n.cfg.Name, ClientUrls: slices.Clone(n.cfg.AdvertiseClientURLs),
		StorageUrl: n.cfg.AdvertiseStorageURL,
	}
	tick := time.NewTicker(n.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.stopping:
			return
		case <-tick.C:
		}
		n.mu.RLock()
		have := n.members.members[n.memberID]
		n.mu.RUnlock()
		if have == nil || n.lead.Load() == 0 {
			continue
		}
		if have.GetName() == want.GetName() && have.GetStorageUrl() == want.GetStorageUrl() &&
			slices.Equal(have.GetClientUrls(), want.GetClientUrls()) {
			n.published.Store(true)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.requestTimeout())
		_, err := n.configure(ctx, &consensuspb.MemberChange{Kind: consensuspb.MemberChange_PUBLISH, Member: want})
		cancel()
		if err != nil {
			select {
			case <-n.stopping:
				return
			default:
			}
			n.log.Warn("publishing member attributes failed; retrying", "member-id", fmt.Sprintf("%x", n.memberID), "err", err)
			continue
		}
		n.published.Store(true)
		n.log.Info("published member attributes", "member-id", fmt.Sprintf("%x", n.memberID), "name", want.GetName(),
			"client-urls", want.GetClientUrls(), "storage-url", want.GetStorageUrl())
		return
	}
}

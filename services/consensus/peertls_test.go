package consensus

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/config"
)

// TestHTTPSPeerURLNeedsPeerTLS: an https:// peer URL without a peer certificate is refused with etcd's
// message, naming --peer-cert-file; http:// peer URLs need none.
func TestHTTPSPeerURLNeedsPeerTLS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		urls    []string
		refused bool
	}{
		{"http", []string{"http://127.0.0.1:2380"}, false},
		{"https", []string{"https://127.0.0.1:2380"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ListenPeerURLs, cfg.InitialAdvertisePeerURLs = tc.urls, tc.urls
			cfg.InitialCluster = cfg.Name + "=" + tc.urls[0]
			err := checkPeerTLS(cfg, nil)
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !slices.Contains(config.Fields(err), "--peer-cert-file") ||
				!strings.Contains(err.Error(), "must be provided for peer url https://127.0.0.1:2380 with HTTPS scheme") {
				t.Fatalf("checkPeerTLS = %v, want etcd's refusal naming --peer-cert-file", err)
			}
		})
	}
}

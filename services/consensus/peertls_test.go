package consensus

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

// TestHTTPSPeerURLNeedsPeerTLS: an https:// peer URL without a peer certificate is refused with etcd's
// message, naming --peer-cert-file; http:// peer URLs need none, and are refused with one.
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
	certs := certtest.Write(t)
	peer, err := tlsconfig.NewLink(tlsconfig.KindPeer, tlsconfig.Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
		TrustedCAFile: certs.CA}, tlsconfig.Policy{}, tlsconfig.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if err := checkPeerTLS(cfg, peer); err == nil || !slices.Contains(config.Fields(err), "--listen-peer-urls") {
		t.Errorf("http peer URLs with a peer certificate: %v, want a refusal naming --listen-peer-urls", err)
	}
	cfg.ListenPeerURLs, cfg.InitialAdvertisePeerURLs = []string{"https://127.0.0.1:2380"}, []string{"https://127.0.0.1:2380"}
	if err := checkPeerTLS(cfg, peer); err != nil {
		t.Errorf("https peer URLs with a peer certificate: %v", err)
	}
}

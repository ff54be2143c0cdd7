package clustertest

import (
	"strings"

	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// ServeHTTPS is a ConfigureFrontend that makes a frontend serve its client URLs over TLS with certs' server
// certificate and answer only clients with a certificate certs' CA signed (etcd's --client-cert-auth). Pair it
// with Options.ClientTLS, e.g. certs.ClientTLS(t, certs.ClientCert, certs.ClientKey).
func ServeHTTPS(certs certtest.Files) func(*frontend.Config) {
	return func(cfg *frontend.Config) {
		for i, u := range cfg.ListenClientURLs {
			cfg.ListenClientURLs[i] = strings.Replace(u, "http://", "https://", 1)
		}
		cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.TrustedCAFile = certs.ServerCert, certs.ServerKey, certs.CA
		cfg.TLS.ClientCertAuth = true
	}
}

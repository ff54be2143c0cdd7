package tlsconfig

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

func TestServerConfig(t *testing.T) {
	certs := certtest.Write(t)
	for _, tc := range []struct {
		name       string
		files      Files
		wantErr    string // empty: no error
		wantClient tls.ClientAuthType
	}{
		{"certificate only", Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}, "", tls.NoClientCert},
		{"client certificates required", Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			TrustedCAFile: certs.CA, ClientCertAuth: true}, "", tls.RequireAndVerifyClientCert},
		{"no key", Files{CertFile: certs.ServerCert}, "--cert-file and --key-file are both needed", 0},
		{"key of another certificate", Files{CertFile: certs.ServerCert, KeyFile: certs.ClientKey}, "load --cert-file/--key-file", 0},
		{"CA file without a certificate", Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			TrustedCAFile: certs.ServerKey}, "holds no PEM certificate", 0},
		{"client-cert-auth without a CA", Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			ClientCertAuth: true}, "--client-cert-auth needs --trusted-ca-file", 0},
	} {
		cfg, err := tc.files.ClientPortConfig(Policy{})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.ClientAuth != tc.wantClient || cfg.NextProtos[0] != "h2" {
			t.Errorf("%s: client auth %v, protocols %v", tc.name, cfg.ClientAuth, cfg.NextProtos)
		}
		if cert, err := cfg.GetCertificate(nil); err != nil || len(cert.Certificate) == 0 {
			t.Errorf("%s: GetCertificate: %v", tc.name, err)
		}
	}
	if err := (Files{}).CheckURL("https://127.0.0.1:2379", true); err == nil {
		t.Error("an https URL without a certificate passed CheckURL")
	}
	if err := (Files{}).CheckURL("http://127.0.0.1:2379", false); err != nil {
		t.Errorf("an http URL: %v", err)
	}
}

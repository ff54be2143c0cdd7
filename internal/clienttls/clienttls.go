// Package clienttls is TLS on the client URLs, configured as etcd's --cert-file, --key-file, --trusted-ca-file
// and --client-cert-auth configure it: an https:// client URL serves TLS with the certificate and key (read
// again at every handshake, so a rotated certificate takes effect without a restart, as in etcd), and with
// --client-cert-auth only clients presenting a certificate signed by a trusted CA get in.
package clienttls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// Files are the TLS settings of the client URLs.
type Files struct {
	// CertFile and KeyFile are the server's certificate and key, PEM (--cert-file, --key-file).
	CertFile, KeyFile string
	// TrustedCAFile is the PEM bundle of CAs client certificates must be signed by (--trusted-ca-file).
	TrustedCAFile string
	// ClientCertAuth requires every client to present such a certificate (--client-cert-auth).
	ClientCertAuth bool
}

// RegisterFlags binds f to etcd's flag names on fs; the current values are the defaults.
func (f *Files) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.CertFile, "cert-file", f.CertFile, "Path to the client server TLS cert file.")
	fs.StringVar(&f.KeyFile, "key-file", f.KeyFile, "Path to the client server TLS key file.")
	fs.StringVar(&f.TrustedCAFile, "trusted-ca-file", f.TrustedCAFile, "Path to the client server TLS trusted CA cert file.")
	fs.BoolVar(&f.ClientCertAuth, "client-cert-auth", f.ClientCertAuth, "Enable client cert authentication.")
}

// Absolute returns f with its paths made absolute, for a child process that may run elsewhere.
func (f Files) Absolute() (Files, error) {
	for _, path := range []*string{&f.CertFile, &f.KeyFile, &f.TrustedCAFile} {
		if *path == "" {
			continue
		}
		abs, err := filepath.Abs(*path)
		if err != nil {
			return f, fmt.Errorf("clienttls: %s: %w", *path, err)
		}
		*path = abs
	}
	return f, nil
}

// Empty reports whether no certificate is configured (etcd's TLSInfo.Empty).
func (f Files) Empty() bool { return f.CertFile == "" && f.KeyFile == "" }

// CheckURL returns etcd's error for an https client URL without a certificate and key.
func (f Files) CheckURL(rawURL string, secure bool) error {
	if secure && (f.CertFile == "" || f.KeyFile == "") {
		return fmt.Errorf("TLS key/cert (--cert-file, --key-file) must be provided for client url %s with HTTPS scheme", rawURL)
	}
	return nil
}

// ServerConfig is the TLS configuration of the https client URLs. It reads every file once now, so a missing
// or malformed one is reported at start; the certificate is read again at each handshake.
func (f Files) ServerConfig() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("clienttls: --cert-file and --key-file are both needed")
	}
	if _, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err != nil {
		return nil, fmt.Errorf("clienttls: load --cert-file/--key-file: %w", err)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"}, // gRPC (HTTP/2) and the JSON gateway share the port
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
			return &cert, err
		},
	}
	if f.TrustedCAFile != "" {
		pem, err := os.ReadFile(f.TrustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("clienttls: read --trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("clienttls: --trusted-ca-file %s holds no PEM certificate", f.TrustedCAFile)
		}
		cfg.ClientCAs = pool
	}
	if f.ClientCertAuth {
		if cfg.ClientCAs == nil {
			return nil, errors.New("clienttls: --client-cert-auth needs --trusted-ca-file")
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

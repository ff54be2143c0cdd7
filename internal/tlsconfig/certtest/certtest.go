// Package certtest writes throwaway PEM certificates for TLS tests: a CA, a server certificate for 127.0.0.1
// and localhost (also good as a client: the internal and peer links present it both ways), a client certificate the CA signed and one it did not.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the paths Write wrote.
type Files struct {
	CA                                string // the CA's certificate
	ServerCert, ServerKey             string
	ClientCert, ClientKey             string // signed by the CA
	UntrustedClientCert, UntrustedKey string // self-signed
}

// ClientTLS is a client's TLS configuration trusting the CA, presenting the given certificate (none when
// certFile is empty).
func (f Files) ClientTLS(t testing.TB, certFile, keyFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// Write writes a fresh set of certificates into a temporary directory of t.
func Write(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "cairn test CA"}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}, nil, nil)
	f := Files{CA: write(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)}
	server, serverKey := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "cairn"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, ca, caKey)
	f.ServerCert, f.ServerKey = write(t, dir, "server.pem", "CERTIFICATE", server.Raw), writeKey(t, dir, "server-key.pem", serverKey)
	client, clientKey := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, caKey)
	f.ClientCert, f.ClientKey = write(t, dir, "client.pem", "CERTIFICATE", client.Raw), writeKey(t, dir, "client-key.pem", clientKey)
	stranger, strangerKey := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "stranger"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, nil, nil)
	f.UntrustedClientCert = write(t, dir, "stranger.pem", "CERTIFICATE", stranger.Raw)
	f.UntrustedKey = writeKey(t, dir, "stranger-key.pem", strangerKey)
	return f
}

// issue makes a certificate from template, signed by parent (self-signed when parent is nil).
func issue(t testing.TB, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	template.SerialNumber = serial
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	template.KeyUsage |= x509.KeyUsageDigitalSignature
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writeKey(t testing.TB, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return write(t, dir, name, "EC PRIVATE KEY", der)
}

func write(t testing.TB, dir, name, blockType string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteJWTKeys writes a fresh ECDSA P-256 key pair as PEM files (the private key as "EC PRIVATE KEY", the public
// one as "PUBLIC KEY"), as etcd's --auth-token jwt,priv-key=...,pub-key=... reads them.
func WriteJWTKeys(t testing.TB) (priv, pub string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	priv, pub = filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

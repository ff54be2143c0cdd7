package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Validity of what a CA issues, and how long before expiry Issue replaces a certificate.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	certValidity = 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// CA is a certificate authority kept in a directory (ca.pem, ca-key.pem), issuing one certificate per process
// into the same directory: what `cairn up --tls` and `cairn dev --tls` run every link with. It is kept across
// restarts: LoadOrCreateCA reuses the files it finds.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Identity is what a process's certificate says of it: a name (its common name and file name), the hosts and
// IPs it serves on, and URI SANs (a role on the bus, see eventbus.RoleURI).
type Identity struct {
	Name  string
	Hosts []string
	URIs  []string
}

// CAFile is the CA certificate's path in dir.
func CAFile(dir string) string { return filepath.Join(dir, "ca.pem") }

// LoadOrCreateCA returns the CA in dir, creating dir and a new CA when there is none.
func LoadOrCreateCA(dir string) (*CA, error) {
	ca := &CA{dir: dir}
	certPEM, certErr := os.ReadFile(CAFile(dir))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	switch {
	case certErr == nil && keyErr == nil:
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: CA in %s: %w", dir, err)
		}
		key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("tlsconfig: CA key in %s is not ECDSA", dir)
		}
		if ca.cert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsconfig: CA in %s: %w", dir, err)
		}
		ca.key = key
		return ca, nil
	case !errors.Is(certErr, os.ErrNotExist) && certErr != nil:
		return nil, fmt.Errorf("tlsconfig: read CA: %w", certErr)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tlsconfig: %w", err)
	}
	template := &x509.Certificate{Subject: pkix.Name{CommonName: "cairn CA", Organization: []string{"cairn"}},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	cert, key, err := sign(template, nil, nil, caValidity)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, "ca", cert, key); err != nil {
		return nil, err
	}
	ca.cert, ca.key = cert, key
	return ca, nil
}

// Files returns the paths of id's certificate, key and the CA, as the --internal-* (or --peer-*, client)
// flags take them.
func (ca *CA) Files(name string) Files {
	return Files{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem"),
		TrustedCAFile: CAFile(ca.dir)}
}

// Issue writes a certificate for id (server and client use), unless one the CA signed for the same names is
// already there and not about to expire. Files are replaced by rename, so a process re-reading them at a
// handshake sees a whole file.
func (ca *CA) Issue(id Identity) (Files, error) {
	files := ca.Files(id.Name)
	if ca.current(files, id) {
		return files, nil
	}
	return files, ca.issue(id)
}

// Reissue writes a new certificate and key for id even if one is there (rotation).
func (ca *CA) Reissue(id Identity) (Files, error) { return ca.Files(id.Name), ca.issue(id) }

func (ca *CA) issue(id Identity) error {
	template := &x509.Certificate{Subject: pkix.Name{CommonName: id.Name, Organization: []string{"cairn"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, h := range id.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	for _, raw := range id.URIs {
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("tlsconfig: URI SAN %q: %w", raw, err)
		}
		template.URIs = append(template.URIs, u)
	}
	cert, key, err := sign(template, ca.cert, ca.key, certValidity)
	if err != nil {
		return err
	}
	return writePair(ca.dir, id.Name, cert, key)
}

// current reports whether files hold a certificate of this CA for exactly id's names, valid for a while yet.
func (ca *CA) current(files Files, id Identity) bool {
	pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || cert.CheckSignatureFrom(ca.cert) != nil || time.Until(cert.NotAfter) < renewBefore {
		return false
	}
	var names []string
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	names = append(names, cert.DNSNames...)
	for _, u := range cert.URIs {
		names = append(names, u.String())
	}
	want := append(append([]string{}, id.Hosts...), id.URIs...)
	if len(names) != len(want) {
		return false
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, n := range want {
		if !have[n] {
			return false
		}
	}
	return true
}

// sign makes a certificate from template with a new P-256 key, signed by parent (self-signed when nil).
func sign(template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: serial: %w", err)
	}
	template.SerialNumber = serial
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(validity)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: sign %s: %w", template.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: %w", err)
	}
	return cert, key, nil
}

// writePair writes name.pem and name-key.pem in dir, each by rename over the old one, the key first.
func writePair(dir, name string, cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("tlsconfig: %w", err)
	}
	if err := writeFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("tlsconfig: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tlsconfig: write %s: %w", path, err)
	}
	return nil
}

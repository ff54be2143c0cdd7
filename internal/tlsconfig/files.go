package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/cairn-kv/cairn/internal/config"
)

// Flag prefixes of the three kinds of link, as etcd names the client and peer flags.
const (
	ClientFlags   = ""          // --cert-file, --key-file, --trusted-ca-file, --client-cert-auth
	PeerFlags     = "peer-"     // --peer-cert-file, ..., --peer-client-cert-auth, --peer-cert-allowed-cn
	InternalFlags = "internal-" // --internal-cert-file, --internal-key-file, --internal-trusted-ca-file
)

// Files are the certificate settings of one kind of link, with etcd's meaning.
type Files struct {
	// CertFile and KeyFile are this process's certificate and key, PEM; presented as a server and, on links
	// this process dials, as a client (etcd uses the peer certificate both ways too).
	CertFile, KeyFile string
	// TrustedCAFile is the PEM bundle of CAs the other end's certificate must be signed by.
	TrustedCAFile string
	// ClientCertAuth requires every client to present a certificate the trusted CAs signed. As in etcd, a
	// trusted CA file alone already requires it on the peer and internal links.
	ClientCertAuth bool
	// AllowedCNs and AllowedHostnames, when set, restrict the certificates accepted to those with one of these
	// common names, or valid for one of these hostnames or IPs (etcd's --peer-cert-allowed-cn and
	// --peer-cert-allowed-hostname; mutually exclusive).
	AllowedCNs, AllowedHostnames []string
	// FlagPrefix is the prefix of the flags these came from (ClientFlags, PeerFlags, InternalFlags), for messages.
	FlagPrefix string
}

// RegisterFlags binds f to etcd's flag names with f.FlagPrefix on fs; the current values are the defaults.
// The client flags are etcd's --cert-file family, the peer flags etcd's --peer-* family (with the allowed CN
// and hostname), the internal flags Cairn's --internal-* (mutual authentication is always on for those).
func (f *Files) RegisterFlags(fs *flag.FlagSet) {
	p, what := f.FlagPrefix, map[string]string{ClientFlags: "client server", PeerFlags: "peer server", InternalFlags: "internal link"}[f.FlagPrefix]
	fs.StringVar(&f.CertFile, p+"cert-file", f.CertFile, "Path to the "+what+" TLS cert file.")
	fs.StringVar(&f.KeyFile, p+"key-file", f.KeyFile, "Path to the "+what+" TLS key file.")
	fs.StringVar(&f.TrustedCAFile, p+"trusted-ca-file", f.TrustedCAFile, "Path to the "+what+" TLS trusted CA file.")
	switch p {
	case ClientFlags:
		fs.BoolVar(&f.ClientCertAuth, "client-cert-auth", f.ClientCertAuth, "Enable client cert authentication.")
	case PeerFlags:
		fs.BoolVar(&f.ClientCertAuth, "peer-client-cert-auth", f.ClientCertAuth, "Enable peer client cert authentication.")
		fs.Var((*names)(&f.AllowedCNs), "peer-cert-allowed-cn", "Comma-separated list of allowed CNs for inter-peer TLS authentication.")
		fs.Var((*names)(&f.AllowedHostnames), "peer-cert-allowed-hostname", "Comma-separated list of allowed SAN hostnames for inter-peer TLS authentication.")
	}
}

// Absolute returns f with its paths made absolute, for a child process that may run elsewhere.
func (f Files) Absolute() (Files, error) {
	for _, path := range []*string{&f.CertFile, &f.KeyFile, &f.TrustedCAFile} {
		if *path == "" {
			continue
		}
		abs, err := filepath.Abs(*path)
		if err != nil {
			return f, fmt.Errorf("tlsconfig: %s: %w", *path, err)
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
		return fmt.Errorf("TLS key/cert (--%scert-file, --%skey-file) must be provided for %surl %s with HTTPS scheme",
			f.FlagPrefix, f.FlagPrefix, map[string]string{ClientFlags: "client ", PeerFlags: "peer "}[f.FlagPrefix], rawURL)
	}
	return nil
}

// Policy is what every TLS link of a process shares: etcd's --tls-min-version, --tls-max-version and
// --cipher-suites.
type Policy struct {
	MinVersion, MaxVersion string
	CipherSuites           []string
}

// RegisterFlags binds p to etcd's flag names on fs.
func (p *Policy) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.MinVersion, "tls-min-version", p.MinVersion, "Minimum TLS version supported by the server and its links. Possible values: TLS1.2, TLS1.3.")
	fs.StringVar(&p.MaxVersion, "tls-max-version", p.MaxVersion, "Maximum TLS version supported by the server and its links. Possible values: TLS1.2, TLS1.3 (empty: Go's default).")
	fs.Var((*names)(&p.CipherSuites), "cipher-suites", "Comma-separated list of supported TLS cipher suites (empty: Go's defaults).")
}

// Validate checks the policy as etcd does: known versions, min not above max, known cipher suites, and no
// cipher suites with TLS 1.3 only (Go does not let them be chosen there).
func (p Policy) Validate() error {
	_, err := p.apply(transport.TLSInfo{})
	return err
}

// apply sets the policy on info.
func (p Policy) apply(info transport.TLSInfo) (transport.TLSInfo, error) {
	var errs []error
	var err error
	if info.MinVersion, err = tlsutil.GetTLSVersion(p.MinVersion); err != nil {
		errs = append(errs, config.Invalid("--tls-min-version", "%w", err))
	}
	if info.MaxVersion, err = tlsutil.GetTLSVersion(p.MaxVersion); err != nil {
		errs = append(errs, config.Invalid("--tls-max-version", "%w", err))
	}
	if info.MinVersion != 0 && info.MaxVersion != 0 && info.MinVersion > info.MaxVersion {
		errs = append(errs, config.Invalid("--tls-min-version", "--tls-min-version %s is above --tls-max-version %s", p.MinVersion, p.MaxVersion))
	}
	if len(p.CipherSuites) > 0 {
		if info.CipherSuites, err = tlsutil.GetCipherSuites(p.CipherSuites); err != nil {
			errs = append(errs, config.Invalid("--cipher-suites", "%w", err))
		}
		if info.MinVersion == tls.VersionTLS13 {
			errs = append(errs, config.Invalid("--cipher-suites", "--cipher-suites cannot be used with TLS1.3"))
		}
	}
	return info, errors.Join(errs...)
}

// info is f and p as etcd's TLSInfo, whose ServerConfig and ClientConfig re-read the certificate at every
// handshake. The checks before it keep the messages in the flags' words.
func (f Files) info(p Policy) (transport.TLSInfo, error) {
	flagName := func(name string) string { return "--" + f.FlagPrefix + name }
	if f.CertFile == "" || f.KeyFile == "" {
		return transport.TLSInfo{}, fmt.Errorf("tlsconfig: %s and %s are both needed", flagName("cert-file"), flagName("key-file"))
	}
	if _, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err != nil {
		return transport.TLSInfo{}, fmt.Errorf("tlsconfig: load %s/%s: %w", flagName("cert-file"), flagName("key-file"), err)
	}
	if f.TrustedCAFile != "" {
		pem, err := os.ReadFile(f.TrustedCAFile)
		if err != nil {
			return transport.TLSInfo{}, fmt.Errorf("tlsconfig: read %s: %w", flagName("trusted-ca-file"), err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return transport.TLSInfo{}, fmt.Errorf("tlsconfig: %s %s holds no PEM certificate", flagName("trusted-ca-file"), f.TrustedCAFile)
		}
	}
	if f.ClientCertAuth && f.TrustedCAFile == "" {
		return transport.TLSInfo{}, fmt.Errorf("tlsconfig: %s needs %s", flagName("client-cert-auth"), flagName("trusted-ca-file"))
	}
	info := transport.TLSInfo{CertFile: f.CertFile, KeyFile: f.KeyFile, TrustedCAFile: f.TrustedCAFile,
		ClientCertAuth: f.ClientCertAuth, AllowedCNs: f.AllowedCNs, AllowedHostnames: f.AllowedHostnames}
	return p.apply(info)
}

// ServerConfig is the TLS configuration that serves f under p: the certificate is read again at every
// handshake (a rotated one takes effect without a restart, as in etcd), and a client must present a certificate
// a trusted CA signed when ClientCertAuth or a trusted CA file is set (etcd's rule), restricted to the allowed
// CNs or hostnames when set. It reads every file once now, so a missing or malformed one is reported at start.
func (f Files) ServerConfig(p Policy) (*tls.Config, error) {
	info, err := f.info(p)
	if err != nil {
		return nil, err
	}
	cfg, err := info.ServerConfig()
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: %w", err)
	}
	return cfg, nil
}

// ClientPortConfig is ServerConfig for etcd's client port: it also speaks HTTP/1.1 (the JSON gateway shares
// the port with gRPC), and asks clients for a certificate only with --client-cert-auth.
func (f Files) ClientPortConfig(p Policy) (*tls.Config, error) {
	cfg, err := f.ServerConfig(p)
	if err != nil {
		return nil, err
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	if !f.ClientCertAuth {
		cfg.ClientAuth = tls.NoClientCert
	}
	return cfg, nil
}

// ClientConfig is the TLS configuration a process dials the links of f with: it presents its certificate (read
// again at every handshake) and verifies the server's against the trusted CAs, with the same CN or hostname
// restriction as ServerConfig.
func (f Files) ClientConfig(p Policy) (*tls.Config, error) {
	info, err := f.info(p)
	if err != nil {
		return nil, err
	}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: %w", err)
	}
	return cfg, nil
}

// names is a comma-separated list flag (CNs, hostnames, cipher suites).
type names []string

func (n *names) String() string { return strings.Join(*n, ",") }

func (n *names) Set(s string) error { return (*config.URLList)(n).Set(s) }

package localstack

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// ClientCertName is the certificate a TLS stack issues for clients (etcdctl, tests): DataDir/pki/client.pem.
const ClientCertName = "client"

// pkiDir is where a TLS stack keeps its CA and every process's certificate.
func (p *plan) pkiDir() string { return filepath.Join(p.cfg.DataDir, "pki") }

// tls reports whether the stack runs every link with mutual TLS: --tls on its first run (kept in the layout).
func (p *plan) tls() bool { return p.layout.TLS }

// files are child's certificate, key and the CA, in the stack's pki directory.
func (p *plan) files(child string) tlsconfig.Files {
	dir := p.pkiDir()
	return tlsconfig.Files{CertFile: filepath.Join(dir, child+".pem"), KeyFile: filepath.Join(dir, child+"-key.pem"),
		TrustedCAFile: tlsconfig.CAFile(dir)}
}

// identity is what child's certificate names.
func (p *plan) identity(child string) tlsconfig.Identity { return CertIdentity(p.cfg.Host, child) }

// CertIdentity is what the certificate of a TLS stack's child (or of ClientCertName) names: the host the
// stack binds, localhost, and for a storage, watchhub or leasekeeper its role on the bus.
func CertIdentity(host, child string) tlsconfig.Identity {
	id := tlsconfig.Identity{Name: child, Hosts: []string{host, "localhost"}}
	kind, _, _ := strings.Cut(child, "-")
	switch kind {
	case eventbus.RoleStorage, eventbus.RoleWatchhub, eventbus.RoleLeasekeeper:
		id.URIs = []string{eventbus.RoleURI(kind)}
	}
	return id
}

// issueCertificates creates the stack's CA on the first run and a certificate for every child and for
// clients, keeping those already there (Issue replaces only missing, foreign or expiring ones).
func (s *Stack) issueCertificates() error {
	ca, err := tlsconfig.LoadOrCreateCA(s.plan.pkiDir())
	if err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	names := []string{ClientCertName}
	s.eachInstance(func(_ service, _ int, name string) { names = append(names, name) })
	for _, name := range names {
		if _, err := ca.Issue(s.plan.identity(name)); err != nil {
			return fmt.Errorf("localstack: certificate of %s: %w", name, err)
		}
	}
	return nil
}

// tlsArgs are child's TLS flags in a TLS stack: the internal link's certificate for every child, etcd's peer
// flags for a consensus member, and the client port's for a frontend (unless Config.ClientTLS names others).
func (p *plan) tlsArgs(svc service, child string) []string {
	if !p.tls() {
		return nil
	}
	f := p.files(child)
	args := []string{"--internal-cert-file", f.CertFile, "--internal-key-file", f.KeyFile, "--internal-trusted-ca-file", f.TrustedCAFile}
	switch svc.name {
	case "consensus":
		args = append(args, "--peer-cert-file", f.CertFile, "--peer-key-file", f.KeyFile,
			"--peer-trusted-ca-file", f.TrustedCAFile, "--peer-client-cert-auth")
	case "frontend":
		if p.cfg.ClientTLS.Empty() {
			args = append(args, "--cert-file", f.CertFile, "--key-file", f.KeyFile)
		}
	}
	return args
}

// EtcdctlFlags are the flags etcdctl needs for this stack's endpoints (empty for a plain stack); valid after
// Plan or Start.
func (s *Stack) EtcdctlFlags() string {
	if s.plan == nil || !s.plan.tls() || !s.cfg.ClientTLS.Empty() {
		return ""
	}
	f := s.plan.files(ClientCertName)
	return fmt.Sprintf("--cacert %s --cert %s --key %s", f.TrustedCAFile, f.CertFile, f.KeyFile)
}

// ClientFiles are the client certificate, key and CA of a TLS stack (for tests and tools); zero for a plain
// one.
func (s *Stack) ClientFiles() tlsconfig.Files {
	if s.plan == nil || !s.plan.tls() {
		return tlsconfig.Files{}
	}
	return s.plan.files(ClientCertName)
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// devComponentCerts are the certificates `cairn dev --tls` issues: one per component (each with its role on
// the bus, see eventbus.RoleURI), and one for clients.
var devComponentCerts = map[string]string{
	"nats": "", "consensus": "", "frontend": "", "client": "",
	"storage": eventbus.RoleStorage, "watchhub": eventbus.RoleWatchhub, "leasekeeper": eventbus.RoleLeasekeeper,
}

// setUpDevTLS prepares `cairn dev --tls`: a CA in DATA-DIR/pki (kept across restarts; a data dir first run
// plain is refused, as its WAL records an http peer URL), a certificate per component, https peer and client
// URLs (client URLs unless given), and the links each component runs with. A data dir that holds a CA runs with TLS even
// without --tls.
func setUpDevTLS(d *devStack, clientURLsSet bool) error {
	pki := filepath.Join(d.do.dataDir, "pki")
	_, caErr := os.Stat(tlsconfig.CAFile(pki))
	_, walErr := os.Stat(filepath.Join(d.do.dataDir, "consensus"))
	switch {
	case caErr == nil:
		d.do.autoTLS = true
	case !d.do.autoTLS:
		return nil
	case walErr == nil:
		return fmt.Errorf("cairn dev: %s was first run without --tls (its peer URL, recorded in the WAL, is http://); "+
			"run `cairn dev --tls` with a new --data-dir, or this one without --tls", d.do.dataDir)
	}
	if !d.proc.opts.tls.internal.Empty() {
		return errors.New("cairn dev: --tls issues its own certificate per component; either leave out --internal-cert-file and " +
			"--internal-key-file, or leave out --tls to run every link on your certificates (with --cert-file/--key-file " +
			"for the client port and --peer-* with an https:// --listen-peer-urls for the peer port)")
	}
	ca, err := tlsconfig.LoadOrCreateCA(pki)
	if err != nil {
		return err
	}
	d.links = map[string]*tlsconfig.Link{}
	for name, role := range devComponentCerts {
		id := tlsconfig.Identity{Name: name, Hosts: []string{"127.0.0.1", "localhost"}}
		if role != "" {
			id.URIs = []string{eventbus.RoleURI(role)}
		}
		files, err := ca.Issue(id)
		if err != nil {
			return err
		}
		if name == "client" {
			d.clientFiles = files
			continue
		}
		kind := tlsconfig.KindInternal
		if d.links[name], err = d.proc.link(kind, files); err != nil {
			return err
		}
		if name == "consensus" {
			if d.peer, err = d.proc.link(tlsconfig.KindPeer, files); err != nil {
				return err
			}
		}
		if name == "frontend" && d.do.tls.Empty() {
			d.do.tls.CertFile, d.do.tls.KeyFile = files.CertFile, files.KeyFile
		}
	}
	d.do.peerURLs = httpsURLs(d.do.peerURLs) // the peer port serves TLS: its URL says so
	if !clientURLsSet {
		d.do.clientURLs = httpsURLs(d.do.clientURLs)
		if len(d.do.advertiseURLs) > 0 {
			d.do.advertiseURLs = httpsURLs(d.do.advertiseURLs)
		}
	}
	return nil
}

// component is the process of one of dev's components, with its own link under --tls.
func (d *devStack) component(service string) *process {
	c := d.proc.component(service)
	if link, ok := d.links[service]; ok {
		c.internal = link
	}
	return c
}

// etcdctlFlags are the flags etcdctl needs for dev's client URLs under --tls ("" without).
func (d *devStack) etcdctlFlags() string {
	if d.clientFiles.Empty() {
		return ""
	}
	return fmt.Sprintf("--endpoints %s --cacert %s --cert %s --key %s", strings.Join(d.do.advertiseURLs, ","),
		d.clientFiles.TrustedCAFile, d.clientFiles.CertFile, d.clientFiles.KeyFile)
}

func httpsURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.Replace(u, "http://", "https://", 1)
	}
	return out
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// healthOptions are the flags of `cairn health`.
type healthOptions struct {
	url     string
	timeout time.Duration
	// tlsFiles are etcdctl's --cacert, --cert and --key, for an https URL.
	tlsFiles tlsconfig.Files
}

// newHealthCommand is `cairn health`: the container health check of the compose stack, whose image has no
// shell and no wget. It asks one /health endpoint (etcd's shape, served by every service's metrics URLs and the
// frontends' client URLs) and exits 0 only when it answers 200 with {"health":"true"}.
func newHealthCommand() *cobra.Command {
	opts := healthOptions{url: "http://127.0.0.1:2381/health", timeout: 5 * time.Second}
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when a Cairn service's /health endpoint answers healthy, non-zero with the reason otherwise",
		Long: "Asks --url (a service's /health, e.g. http://127.0.0.1:2381/health on its --listen-metrics-urls) and " +
			"exits 0 when it answers 200 with {\"health\":\"true\"}; otherwise prints why (refused, timed out, the " +
			"reason the service gave) and exits 1. For https URLs, --cacert verifies the server and --cert/--key " +
			"present a client certificate.",
		Example: "  cairn health --url http://127.0.0.1:2381/health\n" +
			"  cairn health --url https://127.0.0.1:2379/health --cacert ca.pem --cert client.pem --key client-key.pem",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkHealth(cmd.Context(), opts); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is healthy\n", opts.url)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.url, "url", opts.url, "The /health URL to ask (a path-less URL gets /health).")
	fs.DurationVar(&opts.timeout, "timeout", opts.timeout, "How long to wait for the answer.")
	fs.StringVar(&opts.tlsFiles.TrustedCAFile, "cacert", "", "Verify an https server with this CA bundle.")
	fs.StringVar(&opts.tlsFiles.CertFile, "cert", "", "Present this client certificate to an https server.")
	fs.StringVar(&opts.tlsFiles.KeyFile, "key", "", "The key of --cert.")
	return cmd
}

// errUnhealthy is an answer that is not healthy (as opposed to no answer at all).
var errUnhealthy = errors.New("unhealthy")

// checkHealth asks opts.url once and returns why it is not healthy, or nil.
func checkHealth(ctx context.Context, opts healthOptions) error {
	target := opts.url
	if !strings.Contains(strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://"), "/") {
		target += "/health"
	}
	tlsConfig, err := healthTLSConfig(opts.tlsFiles)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("health: --url %q: %w", opts.url, err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %s: no answer: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("health: %s: reading the answer: %w", target, err)
	}
	var answer struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("health: %s: %w: answered %s with %q, not etcd's health JSON", target, errUnhealthy, resp.Status, body)
	}
	if resp.StatusCode != http.StatusOK || answer.Health != "true" {
		return fmt.Errorf("health: %s: %w: %s, health %q, reason %q", target, errUnhealthy, resp.Status, answer.Health, answer.Reason)
	}
	return nil
}

// healthTLSConfig is the TLS configuration for an https URL: the CA to verify with and, when given, a client
// certificate; nil (Go's defaults) without any file.
func healthTLSConfig(files tlsconfig.Files) (*tls.Config, error) {
	if files.CertFile != "" || files.KeyFile != "" {
		if files.CertFile == "" || files.KeyFile == "" {
			return nil, errors.New("health: --cert and --key go together")
		}
		return files.ClientConfig(tlsconfig.Policy{})
	}
	if files.TrustedCAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(files.TrustedCAFile)
	if err != nil {
		return nil, fmt.Errorf("health: --cacert: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("health: --cacert %s holds no PEM certificate", files.TrustedCAFile)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

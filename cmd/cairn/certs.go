package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tools/localstack"
)

func newCertsCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "certs NAME[=HOST,...]...",
		Short: "Create a CA in --dir (unless there is one) and a certificate per named process, for running every link with mutual TLS",
		Long: "Issues, into --dir, a certificate and key (NAME.pem, NAME-key.pem) for each NAME, valid for NAME, the " +
			"extra hosts given after '=', localhost and 127.0.0.1, signed by the CA in --dir (ca.pem, created on the first " +
			"run). A name starting with storage-, watchhub- or leasekeeper- also gets that role on the NATS bus. " +
			"Certificates already there for the same names are kept. Give each process its NAME.pem with " +
			"--internal-cert-file (and consensus members with --peer-cert-file) and ca.pem as the trusted CA.",
		Example: "  cairn certs --dir /pki nats consensus-1 storage-1 watchhub-1 leasekeeper-1 frontend-1=cairn.example.com client",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			ca, err := tlsconfig.LoadOrCreateCA(dir)
			if err != nil {
				return err
			}
			for _, arg := range names {
				name, hosts, _ := strings.Cut(arg, "=")
				id := localstack.CertIdentity("127.0.0.1", name)
				id.Hosts = append(id.Hosts, name)
				if hosts != "" {
					id.Hosts = append(id.Hosts, strings.Split(hosts, ",")...)
				}
				files, err := ca.Issue(id)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %s\n", name, files.CertFile, files.KeyFile)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "CA: %s\n", tlsconfig.CAFile(dir))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "pki", "Directory of the CA and the certificates.")
	return cmd
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/tools/localstack"
)

func newKeysCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create in --dir (unless there) the credentials a stack without internal TLS shares: the NATS role nkeys and the relay secret",
		Long: "Creates, keeping those already there, what `cairn up` keeps in its data dir for a plain stack: an nkey per " +
			"bus role in DIR/nats (ROLE.nk, the seed, mode 0600; ROLE.pub) and the relay secret in DIR/relay-secret " +
			"(mode 0600). Run NATS with --nkeys-dir DIR/nats, each storage, watchhub and leasekeeper with " +
			"--nats-nkey-seed-file DIR/nats/ROLE.nk, and every frontend, watchhub and leasekeeper with " +
			"--relay-secret-file DIR/relay-secret (deploy/compose's keys service does).",
		Example: "  cairn keys --dir /keys",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := localstack.CreateStackKeys(dir); err != nil {
				return err
			}
			for _, role := range eventbus.Roles() {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", role, eventbus.SeedFile(localstack.NkeysDir(dir), role))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "relay secret: %s\n", relayauth.SecretFile(dir))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "keys", "Directory of the credentials.")
	return cmd
}

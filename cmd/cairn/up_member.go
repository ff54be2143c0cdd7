package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/tools/localstack"
)

// newUpMemberCommand is `cairn up member add|remove`: membership changes of a running `cairn up`, which owns
// the processes and the layout and takes the change on DATA-DIR/control.sock.
func newUpMemberCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Add or remove a member of a running `cairn up` (etcd's member add/remove, and the member's processes)",
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "up.cairn", "Data directory of the running cairn up.")

	var learner bool
	add := &cobra.Command{
		Use:   "add [NAME]",
		Short: "Add a member (etcd's MemberAdd), then start its consensus, storage and frontend",
		Long: "Adds member NAME (default: the next member-<n>; a removed member's name is added again on a wiped " +
			"data dir) to the cluster of the `cairn up` running in --data-dir, starts its processes and records " +
			"it in layout.json. Promote a learner with `etcdctl member promote ID` once it has caught up.",
		Example: "  cairn up member add --learner\n  cairn up member add member-2 --learner",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			change, err := localstack.RequestMemberAdd(cmd.Context(), dataDir, name, learner)
			if err != nil {
				return err
			}
			kind := "member"
			if learner {
				kind = "learner"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s %s (ID %s); its processes are running\n", kind, change.Name, change.ID)
			return nil
		},
	}
	add.Flags().BoolVar(&learner, "learner", false, "Add the member as a learner (etcdctl member add --learner).")

	remove := &cobra.Command{
		Use:     "remove NAME",
		Short:   "Remove a member (etcd's MemberRemove) and stop its processes",
		Example: "  cairn up member remove member-2",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			change, err := localstack.RequestMemberRemove(cmd.Context(), dataDir, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed member %s (ID %s); its processes are stopped, its data kept\n", change.Name, change.ID)
			return nil
		},
	}
	cmd.AddCommand(add, remove)
	return cmd
}

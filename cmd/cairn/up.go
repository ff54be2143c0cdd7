package main

import "github.com/spf13/cobra"

func newUpCommand() *cobra.Command { return &cobra.Command{Use: "up", Hidden: true} }

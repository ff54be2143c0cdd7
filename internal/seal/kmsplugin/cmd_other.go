//go:build !linux

package kmsplugin

import "os/exec"

// pluginCommand is the plugin's command line.
func pluginCommand(command string, args []string) *exec.Cmd { return exec.Command(command, args...) }

package kmsplugin

import (
	"os/exec"
	"syscall"
)

// pluginCommand is the plugin's command line; on Linux the plugin is killed when the process that started it
// dies (a storage killed with kill -9 leaves no plugin behind).
func pluginCommand(command string, args []string) *exec.Cmd {
	cmd := exec.Command(command, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

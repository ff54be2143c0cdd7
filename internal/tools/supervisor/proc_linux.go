package supervisor

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// childProcAttr puts the child in its own process group (so signals reach its whole tree) and asks the kernel to
// SIGKILL it if the supervisor dies, so a crashed supervisor leaves no orphans.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExited blocks until process pid has exited, without reaping it (WNOWAIT), so its pid stays reserved.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

package bench

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a child the tool starts receive SIGKILL when the tool
// dies, so a killed run leaves no cluster behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package testutil

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a child process a test starts receive SIGKILL when the
// test binary dies, so a binary killed on timeout (as mutation runs do)
// leaves no redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

//go:build !linux

package bench

import "os/exec"

// dieWithParent is Linux-only (Pdeathsig); elsewhere children are stopped
// only by the tool's own Stop.
func dieWithParent(*exec.Cmd) {}

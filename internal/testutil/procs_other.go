//go:build !linux

package testutil

import "os/exec"

// dieWithParent is Linux-only (Pdeathsig); elsewhere children are stopped
// only by the tests' cleanups.
func dieWithParent(*exec.Cmd) {}

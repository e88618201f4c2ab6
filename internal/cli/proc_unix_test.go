//go:build unix

package cli

import (
	"os/exec"
	"syscall"
)

// runAsUser makes cmd run as uid (its own group too), which only root may
// ask for.
func runAsUser(cmd *exec.Cmd, uid uint32) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
}

package etcdnaming

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes cmd get SIGKILL if the test process dies first (killed,
// or its output pipe closed), so no etcd or server outlives it.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

//go:build unix

package localpg

import "syscall"

func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

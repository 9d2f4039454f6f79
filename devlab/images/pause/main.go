// pause: the sandbox ("pause") image of the lab's one-node cluster, and PID 1 of any local image
// that only has to stay up. It blocks until SIGTERM or SIGINT and then exits 0 at once, so a pod
// is deleted without waiting out its grace period (busybox `sleep` as PID 1 ignores SIGTERM).
// It also reaps children, as PID 1 of a shared PID namespace must.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}

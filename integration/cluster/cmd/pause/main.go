// Command pause is the cluster e2e's sandbox ("pause") image and the
// command of its test pods: it sleeps until SIGTERM or SIGINT and, as PID 1
// of a pod, reaps the zombies that containers sharing its PID namespace
// leave. A static binary in a one-layer image, built and imported locally,
// so nothing is pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

//go:build !unix

package cli

import (
	"os"
	"os/exec"
)

// ownProcessGroup leaves cmd as it is: process groups are a Unix notion;
// the context's cancellation kills the command itself.
func ownProcessGroup(*exec.Cmd) {}

// killedBy reports nothing: without Unix signals a crash is an exit code.
func killedBy(*exec.ExitError) (os.Signal, bool) { return nil, false }

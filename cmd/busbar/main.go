// Command busbar is the broker, relay and command-line tools of the busbar
// message bus. The verbs live in busbar/internal/cli; this file only wires
// the process to them.
package main

import (
	"os"

	"busbar/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}

// Command volplane is the CLI and the agent of volplane.
package main

import (
	"os"

	"github.com/volplane/volplane/command"
)

func main() {
	os.Exit(command.Run(os.Args[1:]))
}

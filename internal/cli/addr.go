package cli

import (
	"encoding/json"
	"flag"
	"fmt"

	"busbar/wire"
)

type addrOutput struct {
	Sub     string `json:"sub"`
	Service string `json:"service"`
	Node    string `json:"node"`
	Display string `json:"display"`
}

type crossMeshOutput struct {
	CrossMesh bool   `json:"cross_mesh"`
	Local     string `json:"local"`
	Mesh      string `json:"mesh"`
}

func init() {
	addVerb(runAddr, []helpPage{
		{path: "addr", args: "ADDRESS", summary: "parse a bus address or target and print it as JSON",
			text: `Prints {"sub","service","node","display"} (absent parts are empty); a
cross-mesh target prints {"cross_mesh","local","mesh"}.`,
			exit:    "0  a valid address\n2  an invalid address",
			example: "$ busbar addr noded.alpha\n{\"sub\":\"\",\"service\":\"noded\",\"node\":\"alpha\",\"display\":\"noded.alpha.bus\"}"},
	})
}

// runAddr prints a target as JSON. A bare service prints with only
// "service" set (its display is the bare name: the registry resolves it).
func runAddr(args []string, stdio IO) int {
	fs := flag.NewFlagSet("busbar addr", flag.ContinueOnError)
	if !parseFlags(stdio, "addr", fs, args) {
		return exitUsage
	}
	if fs.NArg() != 1 {
		return usageError(stdio, "addr", "%s", argCountError("ADDRESS", fs.Args()))
	}
	t, err := wire.ParseTarget(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar addr:", err)
		return exitUsage
	}
	var out any
	switch t.Kind {
	case wire.TargetCrossMesh:
		out = crossMeshOutput{CrossMesh: true, Local: t.Addr.String(), Mesh: t.Mesh}
	case wire.TargetService:
		out = addrOutput{Service: t.Service, Display: t.String()}
	default:
		out = addrOutput{Sub: t.Addr.Sub, Service: t.Addr.Service, Node: t.Addr.Node, Display: t.String()}
	}
	b, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar addr:", err)
		return exitFail
	}
	fmt.Fprintf(stdio.Stdout, "%s\n", b)
	return exitOK
}

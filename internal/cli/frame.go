package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"busbar/wire"
)

func init() {
	addVerb(runFrame, []helpPage{
		{path: "frame", summary: "parse or validate a text frame read on stdin",
			text:    "Tools for the cosmix text frame (docs/protocol.md): parse prints it as JSON, validate lists its defects.",
			exit:    "0  a frame without defects\n1  defects found (validate, parse --strict), or not a frame (parse)\n2  usage, or not a frame (validate)",
			example: "$ printf -- '---\\ntype: event\\n---\\nhi' | busbar frame parse"},
		{path: "frame parse", summary: "print a frame read on stdin as JSON",
			text: `Prints {"headers":{…},"body":"…","report":[…]}: the headers kept, the body,
and one string per defect. Lenient by default; --strict refuses a defect.`,
			example: "$ printf -- '---\\ntype: event\\n---\\nhi' | busbar frame parse\n{\"headers\":{\"type\":\"event\"},\"body\":\"hi\",\"report\":[]}"},
		{path: "frame validate", summary: "print a frame's defects and warnings, one a line",
			text:    "Parse defects first (prefixed parse:), then unknown headers and bad values.",
			example: "$ printf -- '---\\nx-trace: 1\\n---\\n' | busbar frame validate\nx-trace: unknown header"},
	})
}

func runFrame(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "frame", args); !ok {
		return code
	}
	switch args[0] {
	case "parse":
		return runFrameParse(args[1:], stdio)
	case "validate":
		return runFrameValidate(args[1:], stdio)
	}
	return exitUsage // not reached: pickSubcommand knows the subcommands
}

// readFrame reads stdin, at most one byte past the frame limit so that an
// oversize input is reported instead of read whole.
func readFrame(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, wire.MaxMessageBytes+1))
}

type parseOutput struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Report  []string          `json:"report"`
}

// runFrameParse prints a frame as JSON. The default mode is lenient, so the
// report shows every defect; --strict turns a defect into exit status 1.
func runFrameParse(args []string, stdio IO) int {
	fs := flag.NewFlagSet("busbar frame parse", flag.ContinueOnError)
	strict := fs.Bool("strict", false, "refuse any defective header line (exit status 1)")
	lenient := fs.Bool("lenient", false, "skip defective header lines and list them in the report (the default)")
	if !parseNoArgs(stdio, "frame parse", fs, args) {
		return exitUsage
	}
	if *strict && *lenient {
		fmt.Fprintln(stdio.Stderr, "busbar frame parse: --strict and --lenient exclude each other")
		return exitUsage
	}
	data, err := readFrame(stdio.Stdin)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar frame parse:", err)
		return exitFail
	}
	var (
		m      *wire.Message
		report wire.ParseReport
	)
	if *strict {
		m, err = wire.ParseStrict(data)
	} else {
		m, report, err = wire.ParseLenient(data)
	}
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar frame parse:", err)
		return exitFail
	}
	out := parseOutput{Headers: m.HeaderMap(), Body: string(m.Body()), Report: report.Strings()}
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar frame parse:", err)
		return exitFail
	}
	return exitOK
}

// runFrameValidate prints one warning per line: the parse defects first,
// then Validate's findings. Exit 0 when there are none, 1 when there are,
// 2 when stdin is not a frame at all.
func runFrameValidate(args []string, stdio IO) int {
	if !parseNoArgs(stdio, "frame validate", flag.NewFlagSet("busbar frame validate", flag.ContinueOnError), args) {
		return exitUsage
	}
	data, err := readFrame(stdio.Stdin)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar frame validate:", err)
		return exitUsage
	}
	m, report, err := wire.ParseLenient(data)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar frame validate:", err)
		return exitUsage
	}
	warnings := wire.Validate(m)
	for _, d := range report.Strings() {
		fmt.Fprintln(stdio.Stdout, "parse:", d)
	}
	for _, w := range warnings {
		fmt.Fprintln(stdio.Stdout, w)
	}
	if len(report.Defects)+len(warnings) > 0 {
		return exitFail
	}
	return exitOK
}

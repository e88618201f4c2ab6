package cli

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"busbar/bedrock"
	"busbar/seal"
	"busbar/wire"
)

// version is the release's semantic version, set when the binary is
// built (scripts/release does):
//
//	go build -ldflags "-X busbar/internal/cli.version=v1.2.3" ./cmd/busbar
//
// Left empty, the version is the one the go command recorded: the module
// version of `go install MODULE/cmd/busbar@v1.2.3`, the tag's version or
// a pseudo-version for a build in a tagged checkout, "(devel)" otherwise.
var version string

// commit is the VCS revision, set at build like version (scripts/release
// does); left empty, the one the go command recorded (vcs.revision).
var commit string

// buildInfo is what `busbar version` reports about the binary.
type buildInfo struct {
	Version  string // semantic version, or "(devel)"
	Commit   string // VCS revision; empty when the build did not record one
	Time     string // the commit's time (RFC 3339)
	Modified bool   // built from a tree with uncommitted changes
}

// readBuildInfo reads the version set at build, else the go command's
// record of the module and the checkout.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(devel)"}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if v := bi.Main.Version; v != "" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if commit != "" && commit != b.Commit {
		b.Commit, b.Time, b.Modified = commit, "", false
	}
	return b
}

// writeVersion prints the version, the commit, the protocol versions
// this binary speaks and what built it, one per line: the first line is
// "busbar VERSION".
func writeVersion(w io.Writer) {
	b := readBuildInfo()
	fmt.Fprintf(w, "busbar %s\n", b.Version)
	switch {
	case b.Commit == "":
		fmt.Fprintln(w, "commit unknown (built without version control information)")
	case b.Time == "":
		fmt.Fprintf(w, "commit %s\n", b.Commit)
	case b.Modified:
		fmt.Fprintf(w, "commit %s (%s), with uncommitted changes\n", b.Commit, b.Time)
	default:
		fmt.Fprintf(w, "commit %s (%s)\n", b.Commit, b.Time)
	}
	fmt.Fprintf(w, "protocol %s (bus frames), sealed blobs %d (durable delivery), bedrock %d\n",
		wire.ProtocolVersion, seal.Version, bedrock.ProtocolVersion)
	fmt.Fprintf(w, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
func init() {
	addVerb(runVersion, []helpPage{
		{path: "version", summary: "print the version (also: busbar --version, busbar -V)",
			text: `Prints the build's semantic version (vMAJOR.MINOR.PATCH; "(devel)"
for a build that did not set one), the commit it was built from, the
protocol versions it speaks (bus frames, sealed blobs, bedrock) and the
Go version and platform that built it, one per line.`,
			exit: "0  printed", example: "$ busbar version"},
	})
}

// runVersion is `busbar version`, also `busbar --version` and `-V`.
func runVersion(args []string, io IO) int {
	if !parseNoArgs(io, "version", flag.NewFlagSet("version", flag.ContinueOnError), args) {
		return exitUsage
	}
	writeVersion(io.Stdout)
	return exitOK
}

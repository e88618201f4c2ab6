//go:build unix

package cli

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"busbar/transport"
)

// Where the system has no Unix sockets (the error Unix gives is
// EAFNOSUPPORT; Windows before 10 1803 gives its own), serve stops and
// says which flags to run with instead, naming the socket.
func TestServeSaysWhatToRunWithoutUnixSockets(t *testing.T) {
	ep := transport.Endpoint{Scheme: transport.SchemeUnix, Address: "/data/busbar.sock"}
	err := listenError(ep, fmt.Errorf("listen: %w", os.NewSyscallError("socket", syscall.EAFNOSUPPORT)))
	for _, want := range []string{"unix:///data/busbar.sock", "no Unix sockets", "--unix off --http-unix off", "--server tcp://" + defaultTCP} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

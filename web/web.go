// Package web ships busbar's browser client, busbar.js (a plain ES module,
// no build step), embedded in the binary, and the HTTP handler that serves
// it and the bus's WebSocket on a broker's HTTP listener. docs/browser.md
// says how a page uses it.
package web

import (
	"bytes"
	_ "embed"
	"net/http"
	"time"

	"busbar/transport"
)

// ClientPath is where the HTTP listener serves busbar.js.
const ClientPath = "/busbar.js"

//go:embed busbar.js
var clientJS []byte

// ClientJS returns the browser client's source.
func ClientJS() []byte { return clientJS }

// modTime is the binary's, as far as HTTP caching cares: fixed, so a
// conditional request is answered from the embedded bytes.
var modTime = time.Unix(0, 0)

// Handler returns the handler of a broker's HTTP listener: the bus's
// WebSocket at transport.WebSocketPath (bus is a WebSocketListener the
// broker serves) and the browser client at ClientPath. Anything else is
// 404, for now (metrics and the dashboard come later).
func Handler(bus http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(transport.WebSocketPath, bus)
	mux.HandleFunc("GET "+ClientPath, serveClient)
	return mux
}

func serveClient(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/javascript; charset=utf-8")
	// Public code with no secret in it: a loopback page on another port
	// may import it as a module, which needs CORS.
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "busbar.js", modTime, bytes.NewReader(clientJS))
}

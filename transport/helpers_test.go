package transport

// Helpers of the transport tests: certificates, socket paths, listeners.

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"

	"busbar/internal/testcert"
)

// testCert writes a fresh self-signed certificate for localhost and
// 127.0.0.1 to PEM files and returns their paths and a pool trusting it.
func testCert(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	return testcert.Write(t)
}

// serverTLS returns a listening config from LoadTLS and a client config
// trusting it.
func serverTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	certFile, keyFile, roots := testCert(t)
	server, err := LoadTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if server.MinVersion != tls.VersionTLS12 {
		t.Fatalf("LoadTLS MinVersion = %#x, want TLS 1.2", server.MinVersion)
	}
	return server, &tls.Config{RootCAs: roots}
}

// sockPath returns a socket path in a fresh temporary directory.
func sockPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "s.sock")
}

// mustListen listens on the endpoint s and closes the listener at cleanup.
func mustListen(t *testing.T, s string, cfg *tls.Config) net.Listener {
	t.Helper()
	e, err := ParseEndpoint(s)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(e, cfg)
	if err != nil {
		t.Fatalf("Listen(%s): %v", e, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// endpointOf returns the endpoint a listener actually listens on (the
// ephemeral port filled in).
func endpointOf(t *testing.T, scheme Scheme, ln net.Listener) Endpoint {
	t.Helper()
	return Endpoint{Scheme: scheme, Address: ln.Addr().String()}
}

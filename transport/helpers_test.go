package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCert writes a fresh self-signed certificate for localhost and
// 127.0.0.1 to PEM files and returns their paths and a pool trusting it.
func testCert(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "busbar test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
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

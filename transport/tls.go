package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// LoadTLS returns a server configuration holding the certificate and key in
// the given PEM files, with TLS 1.2 as the minimum version.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("transport: load TLS key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// serverTLSConfig checks that cfg can serve and returns a copy with the
// security defaults applied; the caller's config is never modified.
func serverTLSConfig(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, errors.New("transport: tls listener needs a tls.Config")
	}
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
		return nil, errors.New("transport: tls listener needs a certificate (Certificates or GetCertificate)")
	}
	cfg = cfg.Clone()
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	return cfg, nil
}

// clientTLSConfig returns the config to dial addr with. A nil cfg means
// verify against the system roots (RootCAs nil) and the endpoint's host.
func clientTLSConfig(cfg *tls.Config, addr string) *tls.Config {
	if cfg == nil {
		cfg = &tls.Config{}
	} else {
		cfg = cfg.Clone()
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	return cfg
}

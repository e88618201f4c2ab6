package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
	"busbar/internal/testcert"
)

// TestCAFlagTrustsAPrivateCertificateAuthority: a client reaches a
// tls:// broker whose certificate the system does not trust only when
// --ca (or BUSBAR_CA) names the PEM file that does.
func TestCAFlagTrustsAPrivateCertificateAuthority(t *testing.T) {
	cert, key, _ := testcert.Write(t)
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--tls", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	var url string
	testbroker.Eventually(t, 10*time.Second, "the TLS listener", func() bool {
		m := regexp.MustCompile(`listening on tls://(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.stdout.String())
		if m != nil {
			url = "tls://" + m[1]
		}
		return url != ""
	})
	if code, _, errOut := s.busbar(t, "", "ls", "--server", url); code == 0 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("without --ca: exit %d %s", code, errOut)
	}
	if code, out, errOut := s.busbar(t, "", "ls", "--server", url, "--ca", cert); code != 0 || !strings.HasPrefix(out, "NODE") {
		t.Fatalf("with --ca: exit %d %s%s", code, out, errOut)
	}
	if code, _, errOut := runEnv(t, []string{"BUSBAR_DATA=" + s.data, "BUSBAR_CA=" + cert}, "", "ls", "--server", url); code != 0 {
		t.Fatalf("with BUSBAR_CA: exit %d %s", code, errOut)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := s.busbar(t, "", "ls", "--server", url, "--ca", notPEM); code == 0 || !strings.Contains(errOut, "no PEM certificate") {
		t.Fatalf("--ca without a certificate: exit %d %s", code, errOut)
	}
}

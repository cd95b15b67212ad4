package cli

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
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// as PEM files and returns their paths and a pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "lily serve test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

const tlsTestSecret = "ci-secret-0123456789"

// TestServeTLS serves HTTPS with a self-signed certificate: the console's
// session cookie is Secure, and no warning is logged for a non-loopback
// address.
func TestServeTLS(t *testing.T) {
	t.Setenv("LILY_TOKENS", "ci:operator:"+tlsTestSecret)
	db := seedDLQ(t)
	certFile, keyFile, pool := selfSigned(t)
	s := serveProcess(t, "--db", db, "--listen", "0.0.0.0:0", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(s.base, "https://") {
		t.Fatalf("serve printed %q, want an https:// address", s.out.String())
	}
	c := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Get(s.base + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Errorf("healthz over TLS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	resp, err = c.PostForm(s.base+"/login", url.Values{"token": {tlsTestSecret}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "lily_session" {
			session = ck
		}
	}
	if session == nil || !session.Secure || !session.HttpOnly || session.Value == "" {
		t.Errorf("session cookie over TLS = %+v (Set-Cookie %q), want Secure and HttpOnly", session, resp.Header.Get("Set-Cookie"))
	}
	// Plain HTTP to the TLS port is not served.
	if resp, err := http.Get(strings.Replace(s.base, "https://", "http://", 1) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered 200 on the TLS port")
		}
	}
	s.stop(t)
	if strings.Contains(s.errb.String(), "without TLS") {
		t.Errorf("a TLS server warned about plain HTTP: %s", s.errb.String())
	}
	bad := filepath.Join(t.TempDir(), "not-a-cert.pem")
	os.WriteFile(bad, []byte("junk"), 0o644)
	if code, _, stderr := run(t, "serve", "--db", db, "--tls-cert", bad, "--tls-key", keyFile); code != 1 || !strings.Contains(stderr, "--tls-cert "+bad) {
		t.Errorf("a bad certificate: exit %d %s", code, stderr)
	}
}

// TestServePlainNetworkWarning: a non-loopback listen without TLS logs a
// warning naming the fix; a loopback one does not.
func TestServePlainNetworkWarning(t *testing.T) {
	t.Setenv("LILY_TOKENS", "ci:operator:"+tlsTestSecret)
	db := seedDLQ(t)
	open := serveProcess(t, "--db", db, "--listen", "0.0.0.0:0")
	open.stop(t)
	log := open.errb.String()
	for _, want := range []string{"level=WARN", "listening on a non-loopback address without TLS", "--tls-cert and --tls-key", "--trust-proxy", "listen=0.0.0.0:0"} {
		if !strings.Contains(log, want) {
			t.Errorf("the warning lacks %q: %s", want, log)
		}
	}
	local := serveProcess(t, "--db", db, "--listen", "127.0.0.1:0")
	local.stop(t)
	if strings.Contains(local.errb.String(), "without TLS") {
		t.Errorf("a loopback listen warned: %s", local.errb.String())
	}
}

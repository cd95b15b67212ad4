package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSecureCookieBehindTrustedProxy checks the Secure flag of the session
// cookie for requests that did not come over TLS themselves: only a
// trusted proxy's X-Forwarded-Proto: https sets it (TLS itself is covered
// by 'lily serve --tls-cert' in cmd/internal/cli).
func TestSecureCookieBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	login := func(f *fixture, proto string) string {
		t.Helper()
		req, err := http.NewRequest("POST", f.ts.URL+"/login", strings.NewReader(url.Values{"token": {operatorToken.Secret}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		resp, err := browser(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ck := resp.Header.Get("Set-Cookie")
		if !strings.HasPrefix(ck, sessionCookie+"=") || !strings.Contains(ck, "HttpOnly") {
			t.Fatalf("login (X-Forwarded-Proto %q): no session cookie: %d %q", proto, resp.StatusCode, ck)
		}
		return ck
	}
	secure := func(ck string) bool { return strings.Contains(ck, "; Secure") }

	plain := newFixture(t, allTokens)
	for _, proto := range []string{"", "https"} {
		if ck := login(plain, proto); secure(ck) {
			t.Errorf("without TrustProxy, X-Forwarded-Proto %q: cookie %q is Secure (a client could forge the header)", proto, ck)
		}
	}
	proxied := newFixture(t, allTokens, func(o *Options) { o.TrustProxy = true })
	for proto, want := range map[string]bool{"": false, "http": false, "https": true, "HTTPS, http": true, "http, https": false} {
		if ck := login(proxied, proto); secure(ck) != want {
			t.Errorf("TrustProxy, X-Forwarded-Proto %q: cookie %q, want Secure %v", proto, ck, want)
		}
	}
	forced := newFixture(t, allTokens, func(o *Options) { o.SecureCookies = true })
	if ck := login(forced, ""); !secure(ck) {
		t.Errorf("SecureCookies: cookie %q not Secure", ck)
	}
}

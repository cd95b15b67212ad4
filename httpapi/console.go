package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"

	"github.com/lily-mq/lily/config"
)

// web holds the console: one HTML page, its script and its style sheet,
// with no external resources (no CDN, no build step).
//
//go:embed web
var web embed.FS

//go:embed openapi.json
var openapiJSON []byte

// handleOpenAPI serves the OpenAPI document of the API.
func handleOpenAPI(w http.ResponseWriter, _ *http.Request, _ *principal) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapiJSON)
}

// contentSecurityPolicy allows the console's own script and style only.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// mountConsole serves the console: / (the page; in local mode it also
// starts a session, so that the console's writes carry a CSRF token) and
// /assets/ (script and style).
func (s *Server) mountConsole() {
	sub, _ := fs.Sub(web, "web")
	assets := http.StripPrefix("/assets/", http.FileServerFS(sub))
	s.mux.Handle("GET /assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") || strings.HasSuffix(r.URL.Path, ".html") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		assets.ServeHTTP(w, r)
	}))
	page, _ := fs.ReadFile(sub, "index.html")
	s.mux.Handle("GET /{$}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.local() {
			if _, err := s.authenticateSession(r); err != nil {
				s.startSession(w, r, LocalActor, config.RoleAdmin, true)
			}
		}
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	}))
}

// authenticateSession finds a valid console session cookie.
func (s *Server) authenticateSession(r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, err
	}
	if sess := s.sessions.get(c.Value, s.o.Now()); sess != nil {
		return sess, nil
	}
	return nil, http.ErrNoCookie
}

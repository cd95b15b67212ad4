package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
)

// Token is a named credential with a role. Its name is the actor of the
// audit records its requests write.
type Token struct {
	// Name identifies the holder, e.g. "alice".
	Name string
	// Role is config.RoleViewer, config.RoleOperator or config.RoleAdmin.
	Role string
	// Secret is what the client presents (Bearer or the console's login).
	Secret string
	// ShowBodies lets a viewer see message bodies; operators and admins
	// always see them.
	ShowBodies bool
	// EditQueues are the queues whose dead letters the token may edit
	// (config.TokenConfig.EditQueues; "*" for all). Only an operator or
	// admin may have them; no role edits without them (edit.go).
	EditQueues []string
}

// LocalActor is the actor of requests in local mode (no tokens).
const LocalActor = "local"

// TokensEnv is the environment variable 'lily serve' reads tokens from, as
// "name:role:secret,...", in addition to the config's [[token]] entries.
const TokensEnv = "LILY_TOKENS"

// ParseTokenList reads tokens written as "name:role:secret,..." (the
// LILY_TOKENS format). The secret may contain colons.
func ParseTokenList(s string) ([]Token, error) {
	var out []Token
	var errs []error
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		fields := strings.SplitN(part, ":", 3)
		if len(fields) != 3 {
			errs = append(errs, fmt.Errorf("%s: item %d: want name:role:secret, got %d field(s)", TokensEnv, i+1, len(fields)))
			continue
		}
		out = append(out, Token{Name: fields[0], Role: fields[1], Secret: fields[2]})
	}
	return out, errors.Join(errs...)
}

// TokensFromConfig returns the tokens of cfg's [[token]] entries (secrets
// resolved through getenv) followed by those of the LILY_TOKENS variable.
func TokensFromConfig(cfg config.Config, getenv func(string) string) ([]Token, error) {
	var out []Token
	var errs []error
	for _, tc := range cfg.Tokens {
		secret, err := tc.ResolveSecret(getenv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Token{Name: tc.Name, Role: tc.Role, Secret: secret, ShowBodies: tc.ShowBodies, EditQueues: tc.EditQueues})
	}
	if v := getenv(TokensEnv); v != "" {
		ts, err := ParseTokenList(v)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, ts...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, CheckTokens(out)
}

// CheckTokens reports every problem of a token list at once: names empty
// or repeated, unknown roles, secrets shorter than config.MinTokenSecret or
// shared by two tokens.
func CheckTokens(ts []Token) error {
	var errs []error
	names, secrets := map[string]bool{}, map[string]string{}
	for _, t := range ts {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, " ,:\t\n"):
			errs = append(errs, fmt.Errorf("%w: token name %q: must be non-empty, without spaces, commas or colons", lily.ErrInvalidConfig, t.Name))
		case names[t.Name]:
			errs = append(errs, fmt.Errorf("%w: token name %q is used twice: names must be unique (each is an actor in the audit log)", lily.ErrInvalidConfig, t.Name))
		}
		names[t.Name] = true
		if !config.ValidRole(t.Role) {
			errs = append(errs, fmt.Errorf("%w: token %q: role %q: must be viewer, operator or admin", lily.ErrInvalidConfig, t.Name, t.Role))
		} else if len(t.EditQueues) > 0 && t.Role == config.RoleViewer {
			errs = append(errs, fmt.Errorf("%w: token %q: edit_queues %q: a viewer cannot edit; give edit_queues to an operator or admin token", lily.ErrInvalidConfig, t.Name, t.EditQueues))
		}
		if len(t.Secret) < config.MinTokenSecret {
			errs = append(errs, fmt.Errorf("%w: token %q: the secret has %d characters, want at least %d (e.g. 'openssl rand -hex 16')",
				lily.ErrInvalidConfig, t.Name, len(t.Secret), config.MinTokenSecret))
		} else if other, ok := secrets[t.Secret]; ok {
			errs = append(errs, fmt.Errorf("%w: tokens %q and %q have the same secret: give each its own", lily.ErrInvalidConfig, other, t.Name))
		}
		secrets[t.Secret] = t.Name
	}
	return errors.Join(errs...)
}

// permission is what a route needs.
type permission string

const (
	permPublic  permission = ""
	permRead    permission = "read"
	permRedrive permission = "redrive"
	permDiscard permission = "discard"
	permUnpark  permission = "unpark"
	permErase   permission = "erase"
	permExpire  permission = "expire"
	// permEdit needs the operator role AND the token's edit_queues
	// covering the entry's queue (checked by the handler, edit.go).
	permEdit   permission = "edit"
	permTriage permission = "triage"
	permImport permission = "import" // export_import.go
	// permPause pauses and resumes a queue's consumers (presence.go).
	permPause permission = "pause"
)

// roleRank orders the roles: each may do what the ones below it may.
var roleRank = map[string]int{config.RoleViewer: 1, config.RoleOperator: 2, config.RoleAdmin: 3}

// permRole is the least role a permission needs.
var permRole = map[permission]string{
	permRead: config.RoleViewer, permRedrive: config.RoleOperator, permDiscard: config.RoleOperator,
	permUnpark: config.RoleOperator, permErase: config.RoleAdmin, permExpire: config.RoleAdmin,
	permEdit:   config.RoleOperator,
	permTriage: config.RoleOperator,
	permImport: config.RoleAdmin,
	permPause:  config.RoleOperator,
}

// allows reports whether role may do perm.
func allows(role string, perm permission) bool {
	return perm == permPublic || roleRank[role] >= roleRank[permRole[perm]]
}

// principal is who makes a request and how it authenticated.
type principal struct {
	name, role string
	showBodies bool
	editQueues []string
	// via is "bearer", "session" (the console's cookie) or "local" (no
	// tokens configured, no credentials sent).
	via     string
	session *session
}

func (p *principal) bodies() bool { return p.showBodies || p.role != config.RoleViewer }

// permissions lists what p may do, for the console.
func (p *principal) permissions() []string {
	var out []string
	for _, perm := range []permission{permRead, permRedrive, permDiscard, permUnpark, permErase, permExpire, permTriage, permImport, permPause} {
		if allows(p.role, perm) {
			out = append(out, string(perm))
		}
	}
	if len(p.editQueues) > 0 && allows(p.role, permEdit) {
		out = append(out, string(permEdit))
	}
	return out
}

// local reports local mode: no tokens configured.
func (s *Server) local() bool { return len(s.tokens) == 0 }

// sessionCookie is the console's session cookie.
const sessionCookie = "lily_session"

// csrfHeader carries the session's CSRF token on the console's writes.
const csrfHeader = "X-CSRF-Token"

// authenticate finds the principal of r, or returns an error to answer
// with 401.
func (s *Server) authenticate(r *http.Request) (*principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return nil, errors.New(`Authorization: want "Bearer <token secret>"`)
		}
		if s.local() {
			return nil, errors.New("Authorization: this server has no tokens configured (local mode): send no Authorization header")
		}
		t, ok := s.matchToken(strings.TrimSpace(secret))
		if !ok {
			return nil, errors.New("Authorization: unknown token (check the secret, or ask an admin to add a [[token]])")
		}
		return &principal{name: t.Name, role: t.Role, showBodies: t.ShowBodies, editQueues: t.EditQueues, via: "bearer"}, nil
	}
	if sess, err := s.authenticateSession(r); err == nil {
		return &principal{name: sess.name, role: sess.role, showBodies: sess.showBodies, editQueues: sess.editQueues, via: "session", session: sess}, nil
	}
	if s.local() {
		return &principal{name: LocalActor, role: config.RoleAdmin, via: "local"}, nil
	}
	return nil, errors.New("not logged in: send Authorization: Bearer <token secret>, or log in to the console at /")
}

// matchToken finds the token with this secret, comparing every token's
// secret in constant time (over SHA-256 digests, so lengths do not leak).
func (s *Server) matchToken(secret string) (Token, bool) {
	got := sha256.Sum256([]byte(secret))
	var found Token
	ok := 0
	for _, t := range s.tokens {
		want := sha256.Sum256([]byte(t.Secret))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			found, ok = t, 1
		}
	}
	return found, ok == 1
}

// guard authenticates, checks CSRF and the route's permission, then runs
// the handler. A refusal for the role is answered 403 and audited.
func (s *Server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.perm == permPublic {
			rt.h(w, r, nil)
			return
		}
		p, err := s.authenticate(r)
		if err != nil {
			writeError(w, http.StatusUnauthorized, apiError{Error: err.Error(), Field: "Authorization"})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && p.via != "bearer" {
			if err := s.checkCSRF(r, p); err != nil {
				s.refuse(w, r, p, rt, "csrf: "+err.Error(), csrfHeader)
				return
			}
		}
		if !allows(p.role, rt.perm) {
			s.refuse(w, r, p, rt, fmt.Sprintf("token %q has role %s; %s needs the %s role (or admin)", p.name, p.role, rt.perm, permRole[rt.perm]), "role")
			return
		}
		if why, field := bodyPredicate(rt, r, p); why != "" {
			s.refuse(w, r, p, route{method: rt.method, path: rt.path, perm: permQueryBodies}, why, field)
			return
		}
		rt.h(w, r, p)
	})
}

// permQueryBodies is the permission a refused body predicate attempted,
// in its audit record: bodies() is needed to filter or search on bodies.
const permQueryBodies permission = "query_bodies"

// bodyPredicate says why r may not run and the field to blame, or "": a principal that may not
// read bodies may not query them either. A --where filter (every path of
// the language is a body path) answers "match" or "no match" on the raw
// body, so some 30 requests bisect a numeric field and == confirms a
// guessed string; a full-text search matches the words of the (redacted)
// bodies. Both are refused on every route before any SQL runs (a filter in
// a JSON body comes only with writes, which need an operator, who reads
// bodies).
func bodyPredicate(rt route, r *http.Request, p *principal) (why, field string) {
	if p.bodies() {
		return "", ""
	}
	if r.URL.Query().Get("where") != "" {
		return fmt.Sprintf("token %q has role viewer without show_bodies: a where filter reads message bodies, which this token may not (filter by queue, reason, error_type, fingerprint, key or type instead, or ask an admin for show_bodies = true)", p.name), "where"
	}
	if rt.path == "/api/search" {
		return fmt.Sprintf("token %q has role viewer without show_bodies: search matches the words of message bodies, which this token may not read (filter /api/entries or /api/groups by reason, error_type or fingerprint instead, or ask an admin for show_bodies = true)", p.name), "role"
	}
	return "", ""
}

// checkCSRF protects the writes of browsers: a request from another site
// (Origin or Sec-Fetch-Site) is refused, and a session's request must
// carry its CSRF token in X-CSRF-Token. A request without credentials in
// local mode is accepted only from a non-browser client (no Origin, no
// Sec-Fetch-Site): the console always has a session.
func (s *Server) checkCSRF(r *http.Request, p *principal) error {
	if err := sameOrigin(r); err != nil {
		return err
	}
	switch p.via {
	case "session":
		got := r.Header.Get(csrfHeader)
		if got == "" {
			got = r.PostFormValue("csrf_token")
		}
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(p.session.csrf)) != 1 {
			return fmt.Errorf("missing or wrong %s header: the console sends the token of GET /api/session; API clients use Authorization: Bearer", csrfHeader)
		}
	case "local":
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			return errors.New("a browser request without a console session: open the console at / first")
		}
	}
	return nil
}

// sameOrigin refuses a request a browser marks as coming from another site.
func sameOrigin(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("Sec-Fetch-Site %q: only same-origin requests may change anything", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("Origin %q does not match the host %q", o, r.Host)
		}
	}
	return nil
}

// refuse answers 403 and audits the refusal: who, what they tried, why.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, p *principal, rt route, why, field string) {
	sel, _ := json.Marshal(map[string]string{"attempted": string(rt.perm), "method": r.Method, "path": r.URL.Path, "role": p.role})
	rec := &catalog.AuditRecord{Op: catalog.NewOp(s.o.Now()), At: s.o.Now(), Actor: p.name, Action: catalog.ActionRefused,
		Selector: string(sel), Outcome: catalog.OutcomeForbidden, Detail: why}
	if err := s.o.Store.AppendAudit(context.WithoutCancel(r.Context()), rec); err != nil {
		s.o.Logger.Error("httpapi: audit a refusal", "actor", p.name, "err", err)
	}
	s.o.Logger.Warn("httpapi: refused", "actor", p.name, "role", p.role, "method", r.Method, "path", r.URL.Path, "why", why)
	writeError(w, http.StatusForbidden, apiError{Error: "forbidden: " + why, Field: field})
}

// session is one console login.
type session struct {
	name, role string
	showBodies bool
	editQueues []string
	csrf       string
	expires    time.Time
}

// sessions are the console's logins, in memory: a restart logs out.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func newSessions() *sessions { return &sessions{m: map[string]*session{}} }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (ss *sessions) add(sess *session) string {
	id := randomHex(32)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, v := range ss.m { // drop expired ones
		if time.Now().After(v.expires) {
			delete(ss.m, k)
		}
	}
	ss.m[id] = sess
	return id
}

func (ss *sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sess := ss.m[id]
	if sess == nil || now.After(sess.expires) {
		return nil
	}
	return sess
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// startSession logs a principal in to the console: a new session and its
// cookie (HttpOnly, SameSite=Strict).
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, name, role string, showBodies bool, editQueues ...string) {
	sess := &session{name: name, role: role, showBodies: showBodies, editQueues: editQueues, csrf: randomHex(32), expires: s.o.Now().Add(s.o.SessionTTL)}
	id := s.sessions.add(sess)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.secureCookie(r), Expires: sess.expires})
}

// secureCookie reports whether the session cookie of a response to r is
// marked Secure: always with Options.SecureCookies, else when r came over
// TLS, or through a trusted proxy that received it over TLS
// (Options.TrustProxy and X-Forwarded-Proto: https).
func (s *Server) secureCookie(r *http.Request) bool {
	if s.o.SecureCookies || r.TLS != nil {
		return true
	}
	if !s.o.TrustProxy {
		return false
	}
	// The first value is the one the client-facing proxy set.
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// handleLogin takes the console's login form (field "token"): a known
// secret starts a session; the answer redirects to the console.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request, _ *principal) {
	if err := sameOrigin(r); err != nil {
		writeError(w, http.StatusForbidden, apiError{Error: "forbidden: csrf: " + err.Error(), Field: "Origin"})
		return
	}
	if s.local() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	t, ok := s.matchToken(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		http.Redirect(w, r, "/?login=failed", http.StatusSeeOther)
		return
	}
	s.startSession(w, r, t.Name, t.Role, t.ShowBodies, t.EditQueues...)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// handleLogout ends the console session (its form carries csrf_token).
func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request, _ *principal) {
	if sess, err := s.authenticateSession(r); err == nil {
		p := &principal{name: sess.name, role: sess.role, via: "session", session: sess}
		if err := s.checkCSRF(r, p); err != nil {
			writeError(w, http.StatusForbidden, apiError{Error: "forbidden: csrf: " + err.Error(), Field: "csrf_token"})
			return
		}
		c, _ := r.Cookie(sessionCookie)
		s.sessions.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.secureCookie(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sessionJSON is GET /api/session.
type sessionJSON struct {
	Name        string   `json:"name"`
	Role        string   `json:"role"`
	Via         string   `json:"via"`
	Local       bool     `json:"local"`
	ShowBodies  bool     `json:"show_bodies"`
	Permissions []string `json:"permissions"`
	// EditQueues are the queues the principal may edit entries of.
	EditQueues []string `json:"edit_queues,omitempty"`
	CSRFToken  string   `json:"csrf_token,omitempty"`
}

func (s *Server) handleSession(w http.ResponseWriter, _ *http.Request, p *principal) {
	out := sessionJSON{Name: p.name, Role: p.role, Via: p.via, Local: s.local(), ShowBodies: p.bodies(), Permissions: p.permissions(), EditQueues: p.editQueues}
	if p.session != nil {
		out.CSRFToken = p.session.csrf
	}
	writeJSON(w, http.StatusOK, out)
}

// loopbackHost reports whether a Host header names the local machine.
func loopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.Trim(h, "[]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether a listen address binds the loopback
// interface only (127.0.0.0/8, ::1 or localhost); ":8080" and "0.0.0.0"
// do not.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return loopbackHost(host)
}

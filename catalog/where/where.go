// Package where is the --where language of the catalog: conditions on the
// fields of JSON bodies, such as `.customer.id == "42" and .total > 100`
// (docs/where.md). Parse reads an expression; Expr.SQL compiles it to a
// condition in the SQL both catalog stores run, so that a filtered query
// streams like any other. The SQL calls lily_json, json_type and
// json_extract: on SQLite, SQLite's JSON functions and lily_json, which
// this package registers with the driver; on PostgreSQL, functions of the
// same names and results that the catalog's migrations create.
package where

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"modernc.org/sqlite"
)

// ErrInvalid is wrapped by the errors of Parse.
var ErrInvalid = errors.New("invalid --where expression")

// The bounds of an expression, checked by Parse before any SQL exists:
// each comparison compiles to a few nested SQL expressions, and the
// databases refuse a tree too large or too deep with a raw error
// (SQLite "Expression tree is too large", at a depth of 1000;
// PostgreSQL "stack depth limit exceeded"). Within these bounds both
// stores run every expression (catalog's TestWhereBounds).
const (
	// MaxLength is the most bytes an expression may have.
	MaxLength = 4096
	// MaxTerms is the most comparisons (and exists) an expression may
	// hold: an or-chain of MaxTerms terms runs, one more is refused.
	MaxTerms = 100
	// MaxDepth is the most nested "not" and parentheses.
	MaxDepth = 16
)

// Expr is a parsed body field filter (docs/where.md): a condition on the
// fields of JSON bodies, such as `.customer.id == "42" and .total > 100`.
// It runs inside the catalog's SQL on both stores (SQLite json_type and
// json_extract, PostgreSQL jsonpath), so a filtered query streams like any
// other. A body that is not JSON (or was removed) never matches.
type Expr struct {
	src  string
	root whereNode
}

// String returns the expression as it was written.
func (w *Expr) String() string {
	if w == nil {
		return ""
	}
	return w.src
}

// whereNode is one node of the expression tree.
type whereNode interface {
	// sql appends the node's condition, which is never NULL, and its
	// arguments.
	sql(args *[]any) string
}

type whereBool struct {
	op   string // "AND", "OR"
	l, r whereNode
}

func (n whereBool) sql(args *[]any) string {
	l := n.l.sql(args)
	return "(" + l + " " + n.op + " " + n.r.sql(args) + ")"
}

type whereNot struct{ x whereNode }

func (n whereNot) sql(args *[]any) string { return "(NOT " + n.x.sql(args) + ")" }

// whereCmp compares the value at path with a literal (op "exists": the
// path is present, whatever its value).
type whereCmp struct {
	path string // SQLite / SQL-JSON path: $.a.b[0]."c d"
	op   string // ==, !=, <, <=, >, >=, exists
	lit  any    // string, float64, bool, nil (JSON null)
}

// bodyJSON is the body as JSON, NULL when it is not JSON: lily_json is a
// Go function registered with SQLite and a PL/pgSQL function on
// PostgreSQL (catalogdb's migration step 4).
const bodyJSON = "lily_json(body)"

func (n whereCmp) sql(args *[]any) string {
	typ := func() string {
		*args = append(*args, n.path)
		return "json_type(" + bodyJSON + ", ?)"
	}
	val := func() string {
		*args = append(*args, n.path)
		return "json_extract(" + bodyJSON + ", ?)"
	}
	var eq, pre string
	if n.op == "!=" {
		pre = typ() // written before eq below: its argument comes first
	}
	switch n.op {
	case "exists":
		return "(" + typ() + " IS NOT NULL)"
	case "<", "<=", ">", ">=":
		t := typ()
		v := val()
		*args = append(*args, n.lit)
		return "((" + t + " IN ('integer', 'real') AND CAST(" + v + " AS DOUBLE PRECISION) " + n.op + " ?) IS TRUE)"
	}
	switch lit := n.lit.(type) {
	case string:
		t := typ()
		v := val()
		*args = append(*args, lit)
		eq = "(" + t + " = 'text' AND " + v + " = ?)"
	case float64:
		t := typ()
		v := val()
		*args = append(*args, lit)
		eq = "(" + t + " IN ('integer', 'real') AND CAST(" + v + " AS DOUBLE PRECISION) = ?)"
	case bool:
		eq = "(" + typ() + " = '" + strconv.FormatBool(lit) + "')"
	default: // null
		eq = "(" + typ() + " = 'null')"
	}
	if n.op == "==" {
		return "(" + eq + " IS TRUE)"
	}
	// != : the path is there and holds something else.
	return "((" + pre + " IS NOT NULL AND NOT (" + eq + " IS TRUE)) IS TRUE)"
}

// SQL returns w's condition on the body column of lily_dlq_entries, with
// `?` placeholders whose values it appends to args: true only for JSON
// bodies that satisfy the expression, never NULL. It is written for
// catalog.Filter, in the SQL both catalog stores share.
func (w *Expr) SQL(args *[]any) string {
	return "(" + bodyJSON + " IS NOT NULL AND " + w.root.sql(args) + ")"
}

func init() {
	// lily_json(body) returns the body as text when it is valid JSON (and
	// UTF-8), else NULL, so that SQLite's JSON functions see text and a
	// body that is not JSON never matches instead of failing the query.
	sqlite.MustRegisterDeterministicScalarFunction("lily_json", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		var b []byte
		switch v := args[0].(type) {
		case []byte:
			b = v
		case string:
			b = []byte(v)
		default:
			return nil, nil
		}
		if !utf8.Valid(b) || !json.Valid(b) {
			return nil, nil
		}
		return string(b), nil
	})
}

// Parse reads a body field filter (docs/where.md):
//
//	expr   := or
//	or     := and { "or" and }
//	and    := unary { "and" unary }
//	unary  := "not" unary | "(" expr ")" | "exists" "(" path ")" | path op literal
//	path   := segment { segment }         e.g. .customer.id  .items[0].sku  ."first name"
//	segment:= "." name | "." quoted | "[" digits "]"
//	op     := "==" | "!=" | "<" | "<=" | ">" | ">="   (< <= > >= take numbers)
//	literal:= JSON string | JSON number | true | false | null
//
// An error names the position (1-based byte column) and what was
// expected there, and wraps ErrInvalid.
//
// Parse refuses, naming the limit, an expression longer than MaxLength
// bytes, with more than MaxTerms comparisons or nested deeper than
// MaxDepth, and one that is not UTF-8 or holds a NUL character (neither
// can be a JSON body's field or value on PostgreSQL).
func Parse(s string) (*Expr, error) {
	if len(s) > MaxLength {
		return nil, fmt.Errorf("%w: %d bytes: an expression holds at most %d bytes (where.MaxLength); select with fewer terms, or by queue, reason or IDs", ErrInvalid, len(s), MaxLength)
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: the expression is not valid UTF-8", ErrInvalid)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, fmt.Errorf("%w: column %d: a NUL byte, which the catalog cannot compare (PostgreSQL text holds none): remove it", ErrInvalid, i+1)
	}
	p := &whereParser{s: s}
	p.next()
	if p.tok.kind == tEOF {
		return nil, p.errf("an expression such as .customer.id == \"42\"")
	}
	root, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errf(`"and", "or" or the end of the expression`)
	}
	return &Expr{src: s, root: root}, nil
}

type tokKind int

const (
	tEOF tokKind = iota
	tPath
	tOp
	tLParen
	tRParen
	tWord // and, or, not, exists, true, false, null
	tString
	tNumber
	tBad
)

type token struct {
	kind tokKind
	pos  int // 0-based byte offset
	text string
	path string  // tPath: $.a.b
	str  string  // tString
	num  float64 // tNumber
	bad  string  // tBad: what is wrong
}

type whereParser struct {
	s     string
	i     int
	tok   token
	terms int // comparisons read so far (MaxTerms)
	depth int // "not" and "(" open around the current token (MaxDepth)
}

// term counts one comparison against MaxTerms.
func (p *whereParser) term() error {
	if p.terms++; p.terms > MaxTerms {
		return fmt.Errorf("%w: column %d: more than %d comparisons (where.MaxTerms): select with fewer terms, or by queue, reason or IDs, or in several runs", ErrInvalid, p.tok.pos+1, MaxTerms)
	}
	return nil
}

// nest enters one "not" or "(" against MaxDepth.
func (p *whereParser) nest() error {
	if p.depth++; p.depth > MaxDepth {
		return fmt.Errorf("%w: column %d: nested deeper than %d \"not\" and parentheses (where.MaxDepth): write the condition flatter", ErrInvalid, p.tok.pos+1, MaxDepth)
	}
	return nil
}

// errf reports that something else than the current token was expected.
func (p *whereParser) errf(expected string) error {
	got := "the end of the expression"
	switch {
	case p.tok.kind == tBad:
		return fmt.Errorf("%w: column %d: %s (expected %s)", ErrInvalid, p.tok.pos+1, p.tok.bad, expected)
	case p.tok.kind != tEOF:
		got = strconv.Quote(p.tok.text)
	}
	return fmt.Errorf("%w: column %d: expected %s, got %s", ErrInvalid, p.tok.pos+1, expected, got)
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && (c == '-' || (c >= '0' && c <= '9')))
}

// next reads the next token into p.tok.
func (p *whereParser) next() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
	start := p.i
	if p.i >= len(p.s) {
		p.tok = token{kind: tEOF, pos: start}
		return
	}
	c := p.s[p.i]
	switch {
	case c == '.':
		p.tok = p.path(start)
	case c == '(' || c == ')':
		p.i++
		p.tok = token{kind: tLParen, pos: start, text: string(c)}
		if c == ')' {
			p.tok.kind = tRParen
		}
	case c == '=' || c == '!' || c == '<' || c == '>':
		p.i++
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
		}
		op := p.s[start:p.i]
		p.tok = token{kind: tOp, pos: start, text: op}
		if op == "=" || op == "!" {
			p.tok = token{kind: tBad, pos: start, text: op, bad: fmt.Sprintf("%q is not an operator (equality is ==, inequality !=)", op)}
		}
	case c == '"':
		p.tok = p.str(start)
	case c == '-' || (c >= '0' && c <= '9'):
		j := p.i + 1
		for j < len(p.s) && strings.IndexByte("0123456789.eE+-", p.s[j]) >= 0 {
			j++
		}
		text := p.s[start:j]
		p.i = j
		var f float64
		if err := json.Unmarshal([]byte(text), &f); err != nil {
			p.tok = token{kind: tBad, pos: start, text: text, bad: fmt.Sprintf("%q is not a JSON number", text)}
			return
		}
		p.tok = token{kind: tNumber, pos: start, text: text, num: f}
	case isNameByte(c, true):
		j := p.i
		for j < len(p.s) && isNameByte(p.s[j], false) {
			j++
		}
		p.i = j
		p.tok = token{kind: tWord, pos: start, text: p.s[start:j]}
	default:
		r, n := utf8.DecodeRuneInString(p.s[p.i:])
		p.i += n
		p.tok = token{kind: tBad, pos: start, text: string(r), bad: fmt.Sprintf("unexpected character %q", r)}
	}
}

// path reads a field path starting at a '.'.
func (p *whereParser) path(start int) token {
	var b strings.Builder
	b.WriteString("$")
	for p.i < len(p.s) && (p.s[p.i] == '.' || p.s[p.i] == '[') {
		segPos := p.i
		if p.s[p.i] == '[' {
			j := p.i + 1
			for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
				j++
			}
			if j == p.i+1 || j >= len(p.s) || p.s[j] != ']' {
				p.i = j
				return token{kind: tBad, pos: segPos, text: p.s[segPos:p.i], bad: "an array index is [digits], e.g. .items[0]"}
			}
			b.WriteString(p.s[p.i : j+1])
			p.i = j + 1
			continue
		}
		p.i++ // '.'
		switch {
		case p.i < len(p.s) && p.s[p.i] == '"':
			j := p.i + 1
			for j < len(p.s) && p.s[j] != '"' {
				if p.s[j] == '\\' {
					return token{kind: tBad, pos: j, text: p.s[start:j], bad: "a quoted field name cannot hold a backslash or a double quote"}
				}
				j++
			}
			if j >= len(p.s) || j == p.i+1 {
				return token{kind: tBad, pos: segPos, text: p.s[segPos:j], bad: `a quoted field name is ."name", non-empty and closed by "`}
			}
			b.WriteString(`."` + p.s[p.i+1:j] + `"`)
			p.i = j + 1
		case p.i < len(p.s) && isNameByte(p.s[p.i], true):
			j := p.i
			for j < len(p.s) && isNameByte(p.s[j], false) {
				j++
			}
			name := p.s[p.i:j]
			if strings.Contains(name, "-") { // SQLite and SQL/JSON read a bare name up to '-' otherwise
				b.WriteString(`."` + name + `"`)
			} else {
				b.WriteString("." + name)
			}
			p.i = j
		default:
			return token{kind: tBad, pos: p.i, text: p.s[start:p.i], bad: `a field name after "." (letters, digits, _ and -, or "quoted")`}
		}
	}
	return token{kind: tPath, pos: start, text: p.s[start:p.i], path: b.String()}
}

// str reads a JSON string literal.
func (p *whereParser) str(start int) token {
	j := p.i + 1
	for j < len(p.s) && p.s[j] != '"' {
		if p.s[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(p.s) {
		p.i = len(p.s)
		return token{kind: tBad, pos: start, text: p.s[start:], bad: "the string is not closed by a double quote"}
	}
	text := p.s[start : j+1]
	p.i = j + 1
	var v string
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return token{kind: tBad, pos: start, text: text, bad: fmt.Sprintf("%s is not a JSON string (%v)", text, err)}
	}
	if strings.ContainsRune(v, 0) {
		// \u0000: PostgreSQL text holds no NUL ("invalid byte sequence
		// for encoding UTF8"); refused on both stores alike.
		return token{kind: tBad, pos: start, text: text, bad: fmt.Sprintf("%s holds a NUL character (\\u0000), which the catalog cannot compare (PostgreSQL text holds none): remove it", text)}
	}
	return token{kind: tString, pos: start, text: text, str: v}
}

func (p *whereParser) word(w string) bool { return p.tok.kind == tWord && p.tok.text == w }

func (p *whereParser) or() (whereNode, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.word("or") {
		p.next()
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		l = whereBool{op: "OR", l: l, r: r}
	}
	return l, nil
}

func (p *whereParser) and() (whereNode, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.word("and") {
		p.next()
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		l = whereBool{op: "AND", l: l, r: r}
	}
	return l, nil
}

func (p *whereParser) unary() (whereNode, error) {
	switch {
	case p.word("not"):
		if err := p.nest(); err != nil {
			return nil, err
		}
		p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		p.depth--
		return whereNot{x}, nil
	case p.tok.kind == tLParen:
		if err := p.nest(); err != nil {
			return nil, err
		}
		p.next()
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			return nil, p.errf(`")"`)
		}
		p.depth--
		p.next()
		return x, nil
	case p.word("exists"):
		if err := p.term(); err != nil {
			return nil, err
		}
		p.next()
		if p.tok.kind != tLParen {
			return nil, p.errf(`"(" after exists, as in exists(.customer.id)`)
		}
		p.next()
		if p.tok.kind != tPath {
			return nil, p.errf("a field path such as .customer.id")
		}
		path := p.tok.path
		p.next()
		if p.tok.kind != tRParen {
			return nil, p.errf(`")"`)
		}
		p.next()
		return whereCmp{path: path, op: "exists"}, nil
	case p.tok.kind == tPath:
		if err := p.term(); err != nil {
			return nil, err
		}
		path := p.tok.path
		p.next()
		if p.tok.kind != tOp {
			return nil, p.errf("an operator (==, !=, <, <=, >, >=)")
		}
		op := p.tok.text
		p.next()
		var lit any
		switch {
		case p.tok.kind == tString:
			lit = p.tok.str
		case p.tok.kind == tNumber:
			lit = p.tok.num
		case p.word("true"), p.word("false"):
			lit = p.tok.text == "true"
		case p.word("null"):
			lit = nil
		default:
			return nil, p.errf(`a literal: a "string", a number, true, false or null`)
		}
		if _, num := lit.(float64); !num && op != "==" && op != "!=" {
			return nil, p.errf("a number (" + op + " compares numbers only)")
		}
		p.next()
		return whereCmp{path: path, op: op, lit: lit}, nil
	}
	return nil, p.errf(`a field path (.name), "not", "exists(" or "("`)
}

package entryview

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lily-mq/lily/catalog"
)

// diffContext is the number of unchanged lines around each change.
const diffContext = 3

// maxDiffCells bounds the line diff's table (lines of a × lines of b): a
// larger pair gets the size and hash summary instead.
const maxDiffCells = 4_000_000

// Version is one version of an entry's body as 'lily dlq show' prints it:
// version 0 is the original; each later one has the change from the
// version before it.
type Version struct {
	Version    int    `json:"version"`
	BodySHA256 string `json:"body_sha256"`
	BodySize   int64  `json:"body_size"`
	PrevSHA256 string `json:"prev_sha256,omitempty"`
	EditedBy   string `json:"edited_by,omitempty"`
	EditedAt   string `json:"edited_at"`
	Reason     string `json:"reason,omitempty"`
	Erased     bool   `json:"erased"`
	Body       Body   `json:"body"`
	// Diff is the change from the previous version: a unified line diff
	// for text and JSON (JSON indented first), a size and hash summary
	// for binary bodies; empty for version 0 or when the data is gone.
	Diff string `json:"diff,omitempty"`
}

// Versions renders an entry's body versions, each with its diff.
func Versions(vs []catalog.BodyVersion, bodyFormat string) []Version {
	out := make([]Version, len(vs))
	for i, v := range vs {
		out[i] = Version{Version: v.Version, BodySHA256: v.BodySHA256, BodySize: v.BodySize, PrevSHA256: v.PrevSHA256,
			EditedBy: v.EditedBy, EditedAt: v.EditedAt.Format("2006-01-02T15:04:05.000Z07:00"), Reason: v.Reason, Erased: v.Erased,
			Body: RenderBody(v.Body, bodyFormat, v.Erased)}
		if i > 0 && !v.Erased && !vs[i-1].Erased {
			out[i].Diff = Diff(vs[i-1].Version, vs[i-1].Body, v.Version, v.Body)
		}
	}
	return out
}

// Diff describes the change from body a (version va) to body b (version
// vb): a unified line diff when both are UTF-8 text (two JSON bodies are
// indented first, so that a change shows on its own line), else a summary
// of sizes and SHA-256 hashes.
func Diff(va int, a []byte, vb int, b []byte) string {
	ha, hb := hash(a), hash(b)
	summary := fmt.Sprintf("version %d: %d bytes, sha256 %s\nversion %d: %d bytes, sha256 %s\n", va, len(a), ha, vb, len(b), hb)
	if !utf8.Valid(a) || !utf8.Valid(b) || bytes.IndexByte(a, 0) >= 0 || bytes.IndexByte(b, 0) >= 0 {
		return "binary body changed\n" + summary
	}
	ta, tb := string(a), string(b)
	if json.Valid(a) && json.Valid(b) { // both JSON: compare them indented
		ta, tb = diffText(a), diffText(b)
	}
	la, lb := splitLines(ta), splitLines(tb)
	if len(la)*len(lb) > maxDiffCells {
		return "body too large for a line diff\n" + summary
	}
	var w strings.Builder
	fmt.Fprintf(&w, "--- version %d (sha256 %s)\n+++ version %d (sha256 %s)\n", va, short(ha), vb, short(hb))
	writeHunks(&w, la, lb)
	return w.String()
}

func hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func short(h string) string { return h[:12] }

// diffText is b as the diff compares it: indented when it is JSON.
func diffText(b []byte) string {
	var buf bytes.Buffer
	if json.Valid(b) && json.Indent(&buf, bytes.TrimSpace(b), "", "  ") == nil {
		return buf.String()
	}
	return string(b)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	line string
	ai   int // line number in a (1-based) of kept/removed lines
	bi   int // in b of kept/added lines
}

// script is the shortest edit script from a to b (longest common
// subsequence, by dynamic programming).
func script(a, b []string) []op {
	n, m := len(a), len(b)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, op{' ', a[i], i + 1, j + 1})
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] > lcs[i+1][j]): // removals first
			out = append(out, op{'+', b[j], i, j + 1})
			j++
		default:
			out = append(out, op{'-', a[i], i + 1, j})
			i++
		}
	}
	return out
}

// writeHunks writes the unified diff hunks of a -> b.
func writeHunks(w *strings.Builder, a, b []string) {
	ops := script(a, b)
	for start := 0; start < len(ops); {
		// Find the next change.
		for start < len(ops) && ops[start].kind == ' ' {
			start++
		}
		if start == len(ops) {
			return
		}
		from := max(0, start-diffContext)
		end := start
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			k := end
			for k < len(ops) && ops[k].kind == ' ' {
				k++
			}
			if k == len(ops) || k-end > 2*diffContext {
				break
			}
			end = k
		}
		to := min(len(ops), end+diffContext)
		writeHunk(w, ops[from:to])
		start = to
	}
}

func writeHunk(w *strings.Builder, ops []op) {
	var aStart, bStart, aLen, bLen int
	for _, o := range ops {
		if o.kind != '+' {
			if aLen == 0 {
				aStart = o.ai
			}
			aLen++
		}
		if o.kind != '-' {
			if bLen == 0 {
				bStart = o.bi
			}
			bLen++
		}
	}
	if aLen == 0 {
		aStart = ops[0].ai
	}
	if bLen == 0 {
		bStart = ops[0].bi
	}
	fmt.Fprintf(w, "@@ -%d,%d +%d,%d @@\n", aStart, aLen, bStart, bLen)
	for _, o := range ops {
		w.WriteByte(o.kind)
		w.WriteString(o.line)
		w.WriteByte('\n')
	}
}

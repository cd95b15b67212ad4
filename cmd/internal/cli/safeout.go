package cli

import (
	"io"
	"unicode/utf8"
)

// safeWriter keeps what messages carry from acting on the operator's
// terminal. Error messages, header names and values, keys and fingerprints
// come from producers Lily does not control, and a Kafka header holding
// "ESC[2J" clears the screen of whoever runs 'lily dlq show'. Every
// command's output passes through it: control characters other than
// newline and tab (C0, DEL, C1) and the bidirectional overrides that make
// text read differently from what it is ("Trojan source") are written as
// \u00XX escapes — the same meaning inside a JSON string, where
// encoding/json leaves C1 and bidi characters raw, and visible as text.
type safeWriter struct {
	w       io.Writer
	pending []byte // an incomplete UTF-8 sequence at the end of the last Write
	buf     []byte
}

func newSafeWriter(w io.Writer) *safeWriter { return &safeWriter{w: w} }

// rawWriter returns the writer under a safeWriter (for the redrive
// progress bar, which draws with \r on a terminal and prints only
// numbers).
func rawWriter(w io.Writer) io.Writer {
	if s, ok := w.(*safeWriter); ok {
		return s.w
	}
	return w
}

// unsafeRune reports whether r must be escaped.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e || r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

const hexDigits = "0123456789abcdef"

// Write escapes p and writes it; it reports len(p) on success.
func (s *safeWriter) Write(p []byte) (int, error) {
	in := p
	if len(s.pending) > 0 {
		in = append(s.pending, p...)
		s.pending = nil
	}
	out := s.buf[:0]
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf {
			if unsafeRune(rune(c)) {
				out = appendEscape(out, rune(c))
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			s.pending = append([]byte(nil), in[i:]...) // completed by the next Write
			break
		}
		r, n := utf8.DecodeRune(in[i:])
		if r != utf8.RuneError && unsafeRune(r) {
			out = appendEscape(out, r)
		} else {
			out = append(out, in[i:i+n]...)
		}
		i += n
	}
	s.buf = out
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes an incomplete UTF-8 sequence left at the end, as it is.
func (s *safeWriter) Flush() error {
	if len(s.pending) == 0 {
		return nil
	}
	_, err := s.w.Write(s.pending)
	s.pending = nil
	return err
}

func appendEscape(out []byte, r rune) []byte {
	return append(out, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

package browsertest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/chromedp/chromedp"
)

// updatePictures makes the browser tests write the docs' pictures of the
// console instead of checking them (the command is regenerateCommand).
var updatePictures = flag.Bool("update-screenshots", false, "write the docs' pictures of the console (docs/*.png) instead of checking them")

// regenerateCommand writes every picture of the console the docs show.
const regenerateCommand = "cd httpapi/browsertest && go test -count=1 -run TestConsoleInBrowser . -update-screenshots"

// docsDir is the repository's docs/, from this package's directory (where
// go test runs its tests).
const docsDir = "../../docs"

// pictures are the docs' pictures of the console, each with the test that
// takes and checks it.
var pictures = map[string]string{
	"console.png": "TestConsoleInBrowser",
}

// shapeKey is the PNG iTXt keyword under which a picture carries the shape
// of the page it shows.
const shapeKey = "lily-console-shape"

// shapeScript lists, in page order, what a reader of a picture sees of the
// console's structure: the navigation's items, the headings, the form
// labels, the buttons and the table columns — visible ones only. Words
// with a digit (a job or operation ID, a count) read "#", so that what
// changes from run to run does not count; pixels (fonts, antialiasing) do
// not count either.
const shapeScript = `(() => {
  const kinds = {A: "nav", H1: "h1", H2: "h2", H3: "h3", LEGEND: "legend", LABEL: "label", BUTTON: "button", TH: "column"};
  const norm = s => s.split(/\s+/).filter(w => w).map(w => /\d/.test(w) ? "#" : w).join(" ");
  return [...document.querySelectorAll("header nav a, main h1, main h2, main h3, main legend, main label, main button, main thead th")]
    .filter(e => e.getClientRects().length > 0)
    .map(e => [kinds[e.tagName], norm(e.innerText)])
    .filter(([, t]) => t !== "")
    .map(([k, t]) => k + ": " + t);
})()`

// picture takes the picture docs/name of the page as it is now. With
// -update-screenshots it writes it, the page's shape embedded; otherwise
// it fails the test when the committed picture shows another shape than
// the page's — a picture of a console that has changed since.
func (b *chrome) picture(name string) {
	b.t.Helper()
	if pictures[name] != b.t.Name() {
		b.t.Fatalf("picture %s: not one of the pictures (%v); add it with the test that takes it", name, pictures)
	}
	shape, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](shapeScript))
	if err != nil {
		b.t.Fatalf("picture %s: the page's shape: %v", name, err)
	}
	path := filepath.Join(docsDir, name)
	if *updatePictures {
		img, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			b.t.Fatalf("picture %s: %v", name, err)
		}
		img, err = pngWithText(img, shapeKey, strings.Join(shape, "\n"))
		if err != nil {
			b.t.Fatalf("picture %s: %v", name, err)
		}
		if err := os.WriteFile(path, img, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("picture saved to %s", path)
		return
	}
	committed, err := pictureShape(path)
	if err != nil {
		b.t.Fatalf("picture %s: %v; regenerate it from the repository root: %s", name, err, regenerateCommand)
	}
	if d := shapeDiff(committed, shape); d != "" {
		b.t.Errorf("docs/%s is stale: the console no longer looks like it.\n%s\nRegenerate it from the repository root, and commit it:\n\t%s", name, d, regenerateCommand)
	}
}

// pictureShape returns the shape a picture was taken of.
func pictureShape(path string) ([]string, error) {
	img, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text, ok, err := pngText(img, shapeKey)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !ok {
		return nil, fmt.Errorf("%s carries no %s text: it was not written by the regenerating command", path, shapeKey)
	}
	return strings.Split(text, "\n"), nil
}

// shapeDiff tells how the page's shape differs from the picture's, or ""
// when they are the same.
func shapeDiff(picture, page []string) string {
	if slices.Equal(picture, page) {
		return ""
	}
	var lines []string
	for _, s := range missing(picture, page) {
		lines = append(lines, "  the picture shows, the console does not: "+s)
	}
	for _, s := range missing(page, picture) {
		lines = append(lines, "  the console shows, the picture does not: "+s)
	}
	if len(lines) == 0 {
		lines = append(lines, "  the same items in another order:\n    picture: "+strings.Join(picture, " | ")+"\n    console: "+strings.Join(page, " | "))
	}
	return strings.Join(lines, "\n")
}

// missing returns the items of a not in b, counting repeats.
func missing(a, b []string) []string {
	left := map[string]int{}
	for _, s := range b {
		left[s]++
	}
	var out []string
	for _, s := range a {
		if left[s] > 0 {
			left[s]--
			continue
		}
		out = append(out, s)
	}
	return out
}

// pngSignature starts every PNG file.
const pngSignature = "\x89PNG\r\n\x1a\n"

// pngWithText returns img with an iTXt chunk (UTF-8 text, uncompressed)
// holding text under key, right after the header chunk, in place of any
// chunk of that key before.
func pngWithText(img []byte, key, text string) ([]byte, error) {
	chunks, err := pngChunks(img)
	if err != nil {
		return nil, err
	}
	data := append(append([]byte(key), 0, 0, 0, 0, 0), text...) // keyword, no compression, no language, no translated keyword
	out := append([]byte(pngSignature), chunks[0].raw...)
	out = append(out, pngChunk("iTXt", data)...)
	for _, c := range chunks[1:] {
		if k, _, ok := c.itxt(); !ok || k != key {
			out = append(out, c.raw...)
		}
	}
	return out, nil
}

// pngText returns the text of img's iTXt chunk under key.
func pngText(img []byte, key string) (string, bool, error) {
	chunks, err := pngChunks(img)
	if err != nil {
		return "", false, err
	}
	for _, c := range chunks {
		if k, text, ok := c.itxt(); ok && k == key {
			return text, true, nil
		}
	}
	return "", false, nil
}

// pngChunkOf is one chunk of a PNG file: its type, its data and its bytes
// (length, type, data and CRC).
type pngChunkOf struct {
	typ  string
	data []byte
	raw  []byte
}

// itxt returns the keyword and text of an uncompressed iTXt chunk.
func (c pngChunkOf) itxt() (key, text string, ok bool) {
	if c.typ != "iTXt" {
		return "", "", false
	}
	key, rest, ok := strings.Cut(string(c.data), "\x00")
	if !ok || len(rest) < 2 || rest[0] != 0 { // a compressed text is not one of ours
		return "", "", false
	}
	_, rest, ok = strings.Cut(rest[2:], "\x00") // the language tag
	if !ok {
		return "", "", false
	}
	_, text, ok = strings.Cut(rest, "\x00") // the translated keyword
	return key, text, ok
}

// pngChunks splits a PNG file into its chunks, checking each one's CRC;
// the first is the header (IHDR).
func pngChunks(img []byte) ([]pngChunkOf, error) {
	if !bytes.HasPrefix(img, []byte(pngSignature)) {
		return nil, errors.New("not a PNG file")
	}
	var out []pngChunkOf
	for rest := img[len(pngSignature):]; len(rest) > 0; {
		if len(rest) < 12 {
			return nil, errors.New("PNG file truncated")
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-12) {
			return nil, errors.New("PNG chunk runs past the end of the file")
		}
		raw := rest[:12+n]
		if crc32.ChecksumIEEE(raw[4:8+n]) != binary.BigEndian.Uint32(raw[8+n:]) {
			return nil, fmt.Errorf("PNG chunk %q: bad CRC", raw[4:8])
		}
		out = append(out, pngChunkOf{typ: string(raw[4:8]), data: raw[8 : 8+n], raw: raw})
		rest = rest[12+n:]
	}
	if len(out) == 0 || out[0].typ != "IHDR" {
		return nil, errors.New("PNG file does not start with its header chunk")
	}
	return out, nil
}

// pngChunk encodes a chunk: length, type, data, CRC of type and data.
func pngChunk(typ string, data []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	out = append(append(out, typ...), data...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[4:]))
}

package browsertest

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDocPicturesAreChecked: every picture under docs/ is one a browser
// test checks, and carries the shape of the page it was taken of — a
// picture added by hand, or replaced by a screenshot taken by hand, fails
// here rather than going stale unseen. It needs no browser.
func TestDocPicturesAreChecked(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(docsDir, "*.png"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no pictures under %s: the test runs from httpapi/browsertest", docsDir)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if _, ok := pictures[name]; !ok {
			t.Errorf("docs/%s is not a picture a browser test takes and checks: add it to pictures, with the test that takes it", name)
			continue
		}
		shape, err := pictureShape(f)
		if err != nil {
			t.Errorf("docs/%s: %v; regenerate it from the repository root: %s", name, err, regenerateCommand)
			continue
		}
		if !slices.ContainsFunc(shape, func(s string) bool { return strings.HasPrefix(s, "nav: ") }) {
			t.Errorf("docs/%s: its shape names no navigation item: %q", name, shape)
		}
	}
}

// TestPNGText: the shape goes into a PNG as an iTXt chunk that PNG
// readers skip, is read back as written (UTF-8 included), and replaces the
// one written before.
func TestPNGText(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := pngText(buf.Bytes(), shapeKey); err != nil || ok {
		t.Fatalf("a plain PNG: text found %v, %v", ok, err)
	}
	first, err := pngWithText(buf.Bytes(), shapeKey, "nav: Overview\nh1: Redrive")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pngWithText(first, shapeKey, "nav: Overview\nh2: Selection — how · #")
	if err != nil {
		t.Fatal(err)
	}
	if text, ok, err := pngText(out, shapeKey); err != nil || !ok || text != "nav: Overview\nh2: Selection — how · #" {
		t.Errorf("text read back %q, %v, %v", text, ok, err)
	}
	chunks, err := pngChunks(out)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range chunks {
		if _, _, ok := c.itxt(); ok {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d iTXt chunks, want 1: the new text replaces the old", n)
	}
	got, err := png.Decode(bytes.NewReader(out))
	if err != nil || got.Bounds() != img.Bounds() || color.NRGBAModel.Convert(got.At(1, 1)) != color.NRGBAModel.Convert(img.At(1, 1)) {
		t.Errorf("decoded %v, %v", got, err)
	}
	bad := bytes.Clone(out)
	bad[len(pngSignature)+30] ^= 1 // in the iTXt chunk, after the 25-byte IHDR
	if _, _, err := pngText(bad, shapeKey); err == nil || !strings.Contains(err.Error(), "bad CRC") {
		t.Errorf("a corrupted chunk: %v, want a bad CRC", err)
	}
}

// TestShapeDiff: a picture of the same shape passes; another one is
// described by what each side shows that the other does not.
func TestShapeDiff(t *testing.T) {
	picture := []string{"nav: Overview", "nav: Groups", "h1: Redrive"}
	if d := shapeDiff(picture, slices.Clone(picture)); d != "" {
		t.Errorf("same shape: %q", d)
	}
	d := shapeDiff(picture, []string{"nav: Overview", "nav: Groups", "nav: Search", "h1: Redrive job"})
	for _, want := range []string{"the console shows, the picture does not: nav: Search", "the console shows, the picture does not: h1: Redrive job",
		"the picture shows, the console does not: h1: Redrive"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	if d := shapeDiff(picture, []string{"nav: Groups", "nav: Overview", "h1: Redrive"}); !strings.Contains(d, "another order") {
		t.Errorf("reordered: %q", d)
	}
}

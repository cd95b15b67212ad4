// Package models holds the Promela models of Lily's settlement protocols
// and the test that checks them with spin (docs/design.md §14). It has no
// Go code of its own: the models are the subject, this test the harness.
package models

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// check is one property a model states ("check: NAME [fair]").
type check struct {
	name string
	fair bool // checked under weak fairness (pan -f)
}

// mutant is a compile-time switch that breaks the protocol the way a
// plausible bug would, and the property spin must then find violated
// ("mutant: DEFINE PROPERTY [fair]"). A limit is written the same way
// ("limit: DEFINE=VALUE PROPERTY"): bounds past the model's own under which
// the property is known not to hold, an accepted limit of the protocol that
// docs/design.md §14 explains; spin must show it too.
type mutant struct {
	define string
	breaks check
	limit  bool
}

// model is one .pml file and what it declares about itself.
type model struct {
	file    string
	checks  []check
	mutants []mutant
}

var (
	checkLine  = regexp.MustCompile(`^\s*\*?\s*check:\s+(\w+)(\s+fair)?\s*$`)
	mutantLine = regexp.MustCompile(`^\s*\*?\s*(mutant|limit):\s+([\w=]+)\s+(\w+)(\s+fair)?\s*$`)
)

// readModel reads the check: and mutant: lines of a model's header.
func readModel(t *testing.T, file string) model {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := model{file: file}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if g := checkLine.FindStringSubmatch(sc.Text()); g != nil {
			m.checks = append(m.checks, check{name: g[1], fair: g[2] != ""})
		}
		if g := mutantLine.FindStringSubmatch(sc.Text()); g != nil {
			m.mutants = append(m.mutants, mutant{define: g[2], breaks: check{name: g[3], fair: g[4] != ""}, limit: g[1] == "limit"})
		}
	}
	return m
}

// needSpin returns the paths of spin and a C compiler; without them it
// fails under CI=true and skips loudly elsewhere.
func needSpin(t *testing.T) (spin, cc string) {
	t.Helper()
	const how = "apt-get install -y --no-install-recommends spin gcc (Debian's spin package)"
	var missing []string
	spin, err := exec.LookPath("spin")
	if err != nil {
		missing = append(missing, "spin")
	}
	cc, err = exec.LookPath("gcc")
	if err != nil {
		missing = append(missing, "gcc")
	}
	if len(missing) == 0 {
		return spin, cc
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s required under CI=true to model-check the settlement protocols and not on PATH: %s", strings.Join(missing, ", "), how)
	}
	fmt.Fprintf(os.Stderr, "SKIPPING %s: %s not found — the settlement protocols are NOT model-checked; %s\n", t.Name(), strings.Join(missing, ", "), how)
	t.Skipf("SKIPPING: %s not found — %s", strings.Join(missing, ", "), how)
	return "", ""
}

// TestModels checks every model of this directory with spin, exhaustively:
// each property it states must hold (0 errors, search complete), and each
// of its mutants must make spin find a counterexample to the property the
// mutant names. Every property must be broken by at least one mutant: a
// property no mutant can break proves nothing.
func TestModels(t *testing.T) {
	spin, cc := needSpin(t)
	files, err := filepath.Glob("*.pml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no models (*.pml) in models/")
	}
	for _, f := range files {
		m := readModel(t, f)
		t.Run(strings.TrimSuffix(f, ".pml"), func(t *testing.T) {
			t.Parallel()
			if len(m.checks) == 0 {
				t.Fatalf("%s states no property: add \"check: NAME\" lines to its header", f)
			}
			broken := map[string]bool{}
			for _, mu := range m.mutants {
				if !mu.limit {
					broken[mu.breaks.name] = true
				}
				if !contains(m.checks, mu.breaks) {
					t.Errorf("%s: mutant %s breaks %q, which is not one of the model's checks %v (with the same fairness)", f, mu.define, mu.breaks.name, m.checks)
				}
			}
			for _, c := range m.checks {
				if !broken[c.name] {
					t.Errorf("%s: no mutant breaks property %q: add a \"mutant: DEFINE %s\" that breaks the protocol the way a bug would", f, c.name, c.name)
				}
			}
			pan := build(t, spin, cc, f, "", "-O1")
			for _, c := range m.checks {
				r := verify(t, pan, c)
				if r.errors != 0 || !r.complete {
					t.Errorf("%s: property %s: %d errors, search complete %v — the protocol fails it (or the model outgrew its bounds):\n%s", f, c.name, r.errors, r.complete, r.out)
					continue
				}
				t.Logf("%s: %s holds: %d states stored, %d transitions, depth %d, %.1f MB, %s", f, c, r.states, r.transitions, r.depth, r.memMB, r.took.Round(time.Millisecond))
			}
			for _, mu := range m.mutants {
				pan := build(t, spin, cc, f, mu.define, "-O0")
				r := verify(t, pan, mu.breaks)
				switch {
				case r.errors == 0 && mu.limit:
					t.Errorf("%s: limit %s: spin found no counterexample to %s — the documented limit no longer shows: update the model's header and docs/design.md §14:\n%s", f, mu.define, mu.breaks.name, r.out)
				case r.errors == 0:
					t.Errorf("%s: mutant %s: spin found no counterexample to %s — the model cannot tell this bug from the protocol:\n%s", f, mu.define, mu.breaks.name, r.out)
				case mu.limit:
					t.Logf("%s: limit %s shown: %s violated at depth %d (%d states)", f, mu.define, mu.breaks.name, r.depth, r.states)
				default:
					t.Logf("%s: mutant %s caught: %s violated at depth %d (%d states)", f, mu.define, mu.breaks.name, r.depth, r.states)
				}
			}
		})
	}
}

func (c check) String() string {
	if c.fair {
		return c.name + " (weak fairness)"
	}
	return c.name
}

func contains(cs []check, c check) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// build generates the verifier of file (with define set, for a mutant) and
// compiles it; it returns the verifier's path. MEMLIM bounds what a model
// that outgrew its bounds can take from the shared machine (MB).
func build(t *testing.T, spin, cc, file, define, opt string) string {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(file)), src, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-a"}
	if define != "" {
		args = []string{"-D" + define, "-a"}
	}
	run(t, dir, spin, append(args, filepath.Base(file))...)
	pan := filepath.Join(dir, "pan")
	ccArgs := []string{opt, "-w", "-DMEMLIM=1024", "-o", "pan", "pan.c"}
	cached, key := panCache(t, cc, dir, ccArgs)
	if cached != "" && copyFile(cached, pan) == nil {
		return pan
	}
	run(t, dir, cc, ccArgs...)
	if key != "" {
		storePan(pan, key)
	}
	return pan
}

// The verifiers gcc compiles are cached by the hash of what spin wrote
// (pan.c and its headers: the model with its mutant's define), the
// compiler's version and flags, as Go caches packages: the C compile of the
// 32 verifiers took about 20 s of CPU a run and never changes between runs
// of the same models; every search (verify) still runs each time.
var (
	ccVersionOnce sync.Once
	ccVersion     []byte
)

// panCache returns the cached verifier for the spin output in dir (""
// when none) and its cache key ("" when there is no cache directory).
func panCache(t *testing.T, cc, dir string, ccArgs []string) (path, key string) {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		return "", ""
	}
	ccVersionOnce.Do(func() { ccVersion, _ = exec.Command(cc, "--version").Output() })
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%q\x00", cc, ccVersion, ccArgs)
	srcs, err := filepath.Glob(filepath.Join(dir, "pan.*"))
	if err != nil || len(srcs) == 0 {
		return "", ""
	}
	slices.Sort(srcs)
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			return "", ""
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(s), len(b))
		h.Write(b)
	}
	key = filepath.Join(base, "lily", "spin-pan", hex.EncodeToString(h.Sum(nil)))
	if _, err := os.Stat(key); err == nil {
		return key, key
	}
	return "", key
}

// storePan puts a compiled verifier into the cache (a failure only costs
// the next run a compile). Written beside its name and renamed: parallel
// tests never see half a file.
func storePan(pan, key string) {
	if err := os.MkdirAll(filepath.Dir(key), 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(key), "pan-*.tmp")
	if err != nil {
		return
	}
	tmp := f.Name()
	f.Close()
	if copyFile(pan, tmp) == nil {
		os.Rename(tmp, key)
	}
	os.Remove(tmp)
}

// copyFile copies an executable file.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// result is what pan reports of one search.
type result struct {
	errors, states, transitions, depth int
	memMB                              float64
	complete                           bool
	took                               time.Duration
	out                                string
}

var (
	errorsRe = regexp.MustCompile(`depth reached (\d+), errors: (\d+)`)
	statesRe = regexp.MustCompile(`(\d+) states, stored`)
	transRe  = regexp.MustCompile(`(\d+) transitions \(= `)
	memRe    = regexp.MustCompile(`([\d.]+)\s+total actual memory usage`)
)

// verify searches for a counterexample to c: acceptance cycles (-a) catch
// both a violated invariant and a violated liveness property; -f adds weak
// fairness. pan stops at the first error (the default -c1).
func verify(t *testing.T, pan string, c check) result {
	t.Helper()
	args := []string{"-a", "-N", c.name, "-m100000", "-w20"}
	if c.fair {
		args = append(args, "-f")
	}
	start := time.Now()
	cmd := exec.Command(pan, args...)
	cmd.Dir = filepath.Dir(pan)
	outb, err := cmd.CombinedOutput()
	r := result{took: time.Since(start), out: string(outb)}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", pan, strings.Join(args, " "), err, outb)
	}
	g := errorsRe.FindStringSubmatch(r.out)
	if g == nil {
		t.Fatalf("%s %s: no error count in its output:\n%s", pan, strings.Join(args, " "), r.out)
	}
	r.depth, _ = strconv.Atoi(g[1])
	r.errors, _ = strconv.Atoi(g[2])
	if g := statesRe.FindStringSubmatch(r.out); g != nil {
		r.states, _ = strconv.Atoi(g[1])
	}
	if g := transRe.FindStringSubmatch(r.out); g != nil {
		r.transitions, _ = strconv.Atoi(g[1])
	}
	if g := memRe.FindStringSubmatch(r.out); g != nil {
		r.memMB, _ = strconv.ParseFloat(g[1], 64)
	}
	r.complete = !strings.Contains(r.out, "Search not completed") &&
		!strings.Contains(r.out, "max search depth too small") &&
		!strings.Contains(r.out, "out of memory")
	return r
}

package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHintsNameRealCommands walks every 'lily …' hint in the repository's
// Go sources (errors, help texts, log lines) and checks that its words
// are commands and flags the CLI has: a hint that names 'lily list
// --help' (the command is 'lily dlq list') leads nowhere (issue 32).
// Placeholders (FILE, ID, %d, args...) are arguments, not checked.
func TestHintsNameRealCommands(t *testing.T) {
	t.Parallel()
	root := newRoot()
	hint := regexp.MustCompile("['`]lily ([^'`\n]*)['`]")
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "node_modules" || n == "bench" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range hint.FindAllStringSubmatch(string(src), -1) {
			checked++
			if why := checkHint(root, strings.Fields(m[1])); why != "" {
				rel, _ := filepath.Rel(repo, path)
				t.Errorf("%s: 'lily %s': %s", rel, m[1], why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d hints found: the walk looked in the wrong place", checked)
	}
}

// placeholder reports whether a hint's word stands for a value.
var placeholder = regexp.MustCompile(`[%<>A-Z0-9"./,:=*]|\.\.\.|^-$`)

// checkHint follows words through the command tree from root and says
// what does not exist ("" when everything does).
func checkHint(root *cobra.Command, words []string) string {
	cmd, args := root, false
	for i := 0; i < len(words); i++ {
		w := words[i]
		if name, ok := strings.CutPrefix(w, "--"); ok {
			name, _, hasValue := strings.Cut(strings.TrimRight(name, `",`), "=") // a flag at a Go string's end
			if name == "help" {
				continue
			}
			f := cmd.Flags().Lookup(name)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(name)
			}
			if f == nil {
				return "'" + cmd.CommandPath() + "' has no flag --" + name
			}
			if !hasValue && f.NoOptDefVal == "" {
				i++ // its value
			}
			continue
		}
		if args || placeholder.MatchString(w) {
			args = true
			continue
		}
		if strings.Contains(w, "/") { // alternatives: plan/apply/verify
			args = true
			continue
		}
		sub, _, err := cmd.Find([]string{w})
		if err == nil && sub != cmd {
			cmd = sub
			continue
		}
		if cmd.HasSubCommands() {
			return "'" + cmd.CommandPath() + "' has no command " + w
		}
		args = true // an argument of cmd, e.g. a search text
	}
	return ""
}

// TestEveryCommandHasExamples: every command the help shows has a one-line
// summary and at least one example, and every 'lily …' line of an example
// names commands and flags that exist (issue 32 item 4).
func TestEveryCommandHasExamples(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Short == "" || c.Example == "" {
			t.Errorf("'%s': summary %q, example %q; want both", c.CommandPath(), c.Short, c.Example)
		}
		for _, line := range strings.Split(c.Example, "\n") {
			line, _, _ = strings.Cut(line, " #")
			_, cmd, ok := strings.Cut(line, "lily ")
			if !ok {
				continue
			}
			if why := checkHint(c.Root(), strings.Fields(cmd)); why != "" {
				t.Errorf("'%s' example %q: %s", c.CommandPath(), strings.TrimSpace(line), why)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
}

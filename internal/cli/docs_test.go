package cli

// The docs kept honest: every relative link and #anchor in README.md and
// docs/*.md resolves, and the README's quickstart runs as printed,
// through the binary against a real broker.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"busbar/internal/testbroker"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// docFiles are the Markdown files the doc tests read.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	return append(files, filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "CHANGELOG.md"))
}

var (
	fenceRE  = regexp.MustCompile("(?s)\n(```|~~~)[^\n]*\n.*?\n(```|~~~)[ \t]*\n")
	codeRE   = regexp.MustCompile("`[^`\n]*`")
	linkRE   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headRE   = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	anchorRE = regexp.MustCompile(`<a (?:name|id)="([^"]+)"`)
)

// prose is a Markdown file with its code blocks and inline code removed:
// what is in them is not a link or a heading.
func prose(text string) string {
	text = fenceRE.ReplaceAllString("\n"+text+"\n", "\n\n")
	return codeRE.ReplaceAllString(text, "")
}

// slug is a heading's anchor as GitHub makes it: lower case, only
// letters, digits, '-', '_' and spaces kept, spaces made '-'.
func slug(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1") // a link's text
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the #fragments a Markdown file has: its headings' slugs
// (a repeated one gets -1, -2, …) and explicit <a name> anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	p := prose(text)
	for _, m := range headRE.FindAllStringSubmatch(p, -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range anchorRE.FindAllStringSubmatch(p, -1) {
		out[m[1]] = true
	}
	return out
}

func TestDocLinksAndAnchorsResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	links := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(prose(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", rel(file), target, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			as, err := anchorsOf(dest)
			if err != nil {
				t.Errorf("%s: link %q: %v", rel(file), target, err)
			} else if !as[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", rel(file), target, rel(dest), frag)
			}
		}
	}
	if links < 50 {
		t.Fatalf("only %d relative links found: the parser is broken", links)
	}
}

func rel(path string) string {
	if r, err := filepath.Rel(repoRoot, path); err == nil {
		return r
	}
	return path
}

// quickstartStep is one "$ busbar …" line of the quickstart and the
// lines printed under it.
type quickstartStep struct {
	args       []string
	background bool
	want       []string
}

// quickstart reads README.md's quickstart: the first console block after
// "## Quickstart".
func quickstart(t *testing.T) []quickstartStep {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Quickstart\n")
	if !ok {
		t.Fatal("README.md has no ## Quickstart")
	}
	_, block, ok := strings.Cut(section, "```console\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the quickstart has no console block")
	}
	var steps []quickstartStep
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		line := sc.Text()
		cmd, isCmd := strings.CutPrefix(line, "$ ")
		if !isCmd {
			if len(steps) == 0 {
				t.Fatalf("output before any command: %q", line)
			}
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
			continue
		}
		cmd, _, _ = strings.Cut(cmd, " #") // a comment
		cmd = strings.TrimSpace(cmd)
		step := quickstartStep{}
		cmd, step.background = strings.CutSuffix(cmd, " &")
		args, err := shellWords(strings.TrimSpace(cmd))
		if err != nil || len(args) == 0 || args[0] != "busbar" {
			t.Fatalf("quickstart command %q: not a busbar command (%v)", cmd, err)
		}
		step.args = args[1:]
		steps = append(steps, step)
	}
	return steps
}

// shellWords splits s as a POSIX shell would, for the quoting the docs
// use: single and double quotes, no expansions.
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// TestReadmeQuickstartRunsAsPrinted runs every command of the README's
// quickstart against a real broker: the foreground ones exit 0, and each
// line printed under a command is printed (by it, or by a command running
// in the background, as on the reader's terminal). A node name cli-NNNN
// stands for any process's.
func TestReadmeQuickstartRunsAsPrinted(t *testing.T) {
	steps := quickstart(t)
	if len(steps) < 3 {
		t.Fatalf("quickstart of %d commands", len(steps))
	}
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	pid := regexp.MustCompile(`cli-[0-9]+`)
	var bg []*syncBuffer
	for _, st := range steps {
		what := "busbar " + strings.Join(st.args, " ")
		if st.background {
			out, _ := s.background(t, st.args...)
			bg = append(bg, out)
			// What it registers must be in place before the next command,
			// as the reader's pause gives it time to.
			if name := flagValue(st.args, "--name"); name != "" && st.args[0] == "reply" {
				// Connected first, then its handler: wait for the handler.
				s.waitLs(t, what, hasNode(name, "handlers", st.args[1]))
			} else if name != "" {
				s.waitLs(t, what, func(n []map[string]any) bool { return hasAny(n, name) })
			} else {
				s.waitLs(t, what, func(n []map[string]any) bool {
					for _, node := range n {
						if subs, _ := node["subscriptions"].([]any); len(subs) > 0 {
							return true
						}
					}
					return false
				})
			}
			continue
		}
		code, out, errOut := s.busbar(t, "", st.args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", what, code, errOut)
		}
		testbroker.Await(t, 30*time.Second, what+"'s output", func() error {
			printed := out
			for _, b := range bg {
				printed += "\n" + b.String()
			}
			printed = pid.ReplaceAllString(printed, "cli-N")
			for _, w := range st.want {
				if !strings.Contains(printed, pid.ReplaceAllString(w, "cli-N")) {
					return fmt.Errorf("%q not printed; printed:\n%s", w, printed)
				}
			}
			return nil
		})
	}
}

// flagValue is the value of flag name in args ("--name x"), or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

package archtest

import (
	"bufio"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// DocRef is a reference to a page under docs/ in a comment.
type DocRef struct {
	Pos    token.Position // where the comment is, relative to the root
	Path   string         // the file or directory referred to, relative to the root
	Anchor string         // the heading's anchor, "" when none is named
	// Problem says what is wrong with the reference; "" when it resolves.
	Problem string
}

func (r DocRef) String() string {
	target := r.Path
	if r.Anchor != "" {
		target += "#" + r.Anchor
	}
	return fmt.Sprintf("%s:%d: %s: %s", r.Pos.Filename, r.Pos.Line, target, r.Problem)
}

// docRef matches a path under docs/ at the start of a word, with an
// optional heading: either an anchor (docs/api/tasks.md#business-codes)
// or the heading's text in quotes after a comma (docs/api/quota.md,
// "Quotas").
// The path may end in a sentence's full stop, which is trimmed.
var docRef = regexp.MustCompile(`(?:^|[^\w./-])(docs/[\w./-]*)(?:#([\w-]+)|, "([^"\n]+)")?`)

// skipDirs are directories no source of the repository lives in.
var skipDirs = []string{".git", "bin", "node_modules", "testdata", "third_party"}

// BrokenDocRefs scans the comments of every Go and proto file under root
// (a repository root, the directory that holds docs/) for references to
// docs/ and returns the ones that do not resolve: a file or directory
// that does not exist, or a heading that the Markdown page does not have.
// It also returns how many references it checked, so a caller can tell a
// clean tree from a scan that found nothing.
func BrokenDocRefs(root string) (broken []DocRef, checked int, err error) {
	pages := make(map[string][]string) // page → its anchors, read once
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skipDirs, d.Name())) {
				return filepath.SkipDir
			}
			return nil
		}
		var comments []comment
		switch filepath.Ext(path) {
		case ".go":
			comments, err = goComments(path)
		case ".proto":
			comments, err = protoComments(path)
		default:
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, c := range comments {
			for _, ref := range findDocRefs(c.text) {
				checked++
				ref.Pos = token.Position{Filename: rel, Line: c.line}
				if ref.Problem = resolve(root, ref, pages); ref.Problem != "" {
					broken = append(broken, ref)
				}
			}
		}
		return nil
	})
	return broken, checked, err
}

// comment is the text of one comment (a // line or a /* */ block) and the
// line it starts on.
type comment struct {
	text string
	line int
}

func goComments(path string) ([]comment, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	var scanErr error
	s.Init(file, src, func(pos token.Position, msg string) {
		if scanErr == nil {
			scanErr = fmt.Errorf("%s: %s", pos, msg)
		}
	}, scanner.ScanComments)
	var out []comment
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.COMMENT {
			out = append(out, comment{text: lit, line: fset.Position(pos).Line})
		}
	}
	return out, scanErr
}

// protoComments returns the // comments of a proto file. Strings in
// protos never hold "//" where it matters here, so a line scan suffices.
func protoComments(path string) ([]comment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []comment
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if i := strings.Index(sc.Text(), "//"); i >= 0 {
			out = append(out, comment{text: sc.Text()[i:], line: n})
		}
	}
	return out, sc.Err()
}

func findDocRefs(text string) []DocRef {
	var out []DocRef
	for _, m := range docRef.FindAllStringSubmatch(text, -1) {
		ref := DocRef{Path: strings.TrimRight(m[1], "."), Anchor: m[2]}
		if m[3] != "" {
			ref.Anchor = slug(m[3])
		}
		out = append(out, ref)
	}
	return out
}

func resolve(root string, ref DocRef, pages map[string][]string) string {
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(ref.Path)))
	if err != nil {
		return "no such file or directory"
	}
	if ref.Anchor == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(ref.Path, ".md") {
		return "a heading can only be named on a Markdown page"
	}
	anchors, ok := pages[ref.Path]
	if !ok {
		if anchors, err = markdownAnchors(filepath.Join(root, filepath.FromSlash(ref.Path))); err != nil {
			return err.Error()
		}
		pages[ref.Path] = anchors
	}
	if !slices.Contains(anchors, ref.Anchor) {
		return "the page has no heading with this anchor"
	}
	return ""
}

// markdownAnchors returns the anchors of a page's headings as GitHub
// makes them (see slug), numbering repeated ones ("x", "x-1", …), plus
// the ids of explicit <a id="…"> or <a name="…"> anchors.
func markdownAnchors(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var anchors []string
	seen := make(map[string]int)
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range explicitAnchor.FindAllStringSubmatch(line, -1) {
			anchors = append(anchors, m[1])
		}
		text, ok := heading(line)
		if !ok {
			continue
		}
		a := slug(text)
		if n := seen[a]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", a, n))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors, nil
}

var explicitAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

// heading returns the text of an ATX heading line ("## Leases").
func heading(line string) (string, bool) {
	level := len(line) - len(strings.TrimLeft(line, "#"))
	if level == 0 || level > 6 || (len(line) > level && line[level] != ' ') {
		return "", false
	}
	text := strings.TrimSpace(line[level:])
	text = strings.TrimSpace(strings.TrimRight(text, "#"))
	return text, true
}

var markdownLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: the text of its links kept, lower
// case, letters, digits, "_" and "-" kept, spaces turned into "-", every
// other character dropped ("### `taskmesh.task.v1.TaskService`" →
// "taskmeshtaskv1taskservice", "## The agent's loops" → "the-agents-loops").
func slug(text string) string {
	text = markdownLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// RequireDocRefs fails t for every reference to docs/ in the comments of
// the repository at root that does not resolve, and when it finds no
// reference at all (a scan of the wrong directory).
func RequireDocRefs(t testing.TB, root string) {
	t.Helper()
	broken, checked, err := BrokenDocRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatalf("no comment under %s refers to docs/: is it the repository's root?", root)
	}
	for _, r := range broken {
		t.Errorf("%s (point the comment at a page and heading under docs/ that exist)", r)
	}
	t.Logf("%d references to docs/ checked", checked)
}

package docgen

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Pages are the Markdown files whose links CheckLinks follows: README.md and
// every page under docs/, except docs/pending/ (drafts waiting to be placed).
func Pages(root string) ([]string, error) {
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == "docs/pending" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, rel)
		}
		return nil
	})
	return pages, err
}

// BrokenLink is a relative link that leads nowhere.
type BrokenLink struct {
	Page   string // the page holding the link, relative to the root
	Line   int
	Target string // the link as written
	Reason string
}

func (b BrokenLink) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", b.Page, b.Line, b.Target, b.Reason)
}

// inlineLink matches [text](target) and ![alt](target); the target ends at
// the first space (a title may follow) or closing parenthesis.
var inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)

// CheckLinks follows every relative link of pages (paths relative to root,
// slash-separated): the file or directory must exist, and a #fragment must
// name a heading of the Markdown page it points to. Links with a scheme
// (https:, mailto:) are not followed. Links inside code spans and fenced
// code blocks are not links.
func CheckLinks(root string, pages []string) ([]BrokenLink, error) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			return nil, err
		}
		a := Anchors(string(b))
		anchors[page] = a
		return a, nil
	}
	var broken []BrokenLink
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			return nil, err
		}
		for _, l := range links(string(b)) {
			bad := func(reason string) {
				broken = append(broken, BrokenLink{Page: page, Line: l.line, Target: l.target, Reason: reason})
			}
			if hasScheme(l.target) {
				continue
			}
			file, frag, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = path.Clean(path.Join(path.Dir(page), file))
				if target == ".." || strings.HasPrefix(target, "../") {
					bad("leaves the repository")
					continue
				}
				info, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
				if err != nil {
					bad("no such file")
					continue
				}
				if info.IsDir() {
					if frag != "" {
						bad("an #anchor on a directory")
					}
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				bad("an #anchor on a file that is not Markdown")
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				return nil, err
			}
			if !a[frag] {
				bad(fmt.Sprintf("%s has no heading with the anchor #%s", target, frag))
			}
		}
	}
	return broken, nil
}

func hasScheme(target string) bool {
	i := strings.IndexByte(target, ':')
	if i <= 0 {
		return false
	}
	for _, r := range target[:i] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

type link struct {
	line   int
	target string
}

// links returns the inline links of a Markdown page, outside code.
func links(doc string) []link {
	var out []link
	for i, line := range prose(doc) {
		if line == "" {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, link{line: i + 1, target: m[1]})
		}
	}
	return out
}

// prose returns doc's lines with the lines of fenced code blocks (and their
// fences) blanked, so that line numbers stay.
func prose(doc string) []string {
	lines := strings.Split(doc, "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
		case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
			n := len(t) - len(strings.TrimLeft(t, t[:1]))
			fence = t[:n]
			lines[i] = ""
		}
	}
	return lines
}

var codeSpan = regexp.MustCompile("`+[^`]*`+")

func stripCodeSpans(line string) string { return codeSpan.ReplaceAllString(line, "``") }

// heading matches an ATX heading: its text is group 1.
var heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// markup are the inline constructs whose text a heading's anchor keeps:
// links (their text), images (nothing), code spans (their content).
var (
	mdImage = regexp.MustCompile(`!\[[^\]]*\]\([^)]*\)`)
	mdLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Anchors returns the #fragments the headings of a Markdown page get, as
// GitHub makes them: the heading's text, lower-cased, without punctuation,
// spaces turned into hyphens, "-1", "-2"… appended to repeats.
func Anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(doc) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := Slug(m[1])
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// Slug is the anchor GitHub gives a heading with the text h.
func Slug(h string) string {
	h = mdImage.ReplaceAllString(h, "")
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsNumber(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

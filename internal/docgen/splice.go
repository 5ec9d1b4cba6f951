// Package docgen keeps the documentation's reference parts in step with the
// code: it writes the generated sections of docs/ pages (the configuration
// reference from the flags, the Push API reference from its OpenAPI
// document, the metrics from internal/metrics) and checks the links of
// README.md and docs/.
//
// A generated section sits between two HTML comments, so the prose around it
// stays hand-written:
//
//	<!-- generated: NAME; `make docs` rewrites it, edit the source instead -->
//	…
//	<!-- end generated: NAME -->
package docgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MakeDocs is the command that regenerates every generated section.
const MakeDocs = "make docs"

// ErrNoSection means a page has no generated section of that name.
var ErrNoSection = errors.New("no generated section")

func beginMarker(name string) string {
	return "<!-- generated: " + name + "; `" + MakeDocs + "` rewrites it, edit the source instead -->"
}

func endMarker(name string) string { return "<!-- end generated: " + name + " -->" }

// bounds returns where the section name's content starts and ends in doc
// (between the marker lines, both excluded).
func bounds(doc []byte, name string) (start, end int, err error) {
	begin, stop := []byte(beginMarker(name)+"\n"), []byte("\n"+endMarker(name))
	b := bytes.Index(doc, begin)
	if b < 0 {
		return 0, 0, fmt.Errorf("%w %q: the line %s is missing", ErrNoSection, name, beginMarker(name))
	}
	start = b + len(begin)
	e := bytes.Index(doc[start-1:], stop)
	if e < 0 {
		return 0, 0, fmt.Errorf("%w %q: the line %s is missing after its start", ErrNoSection, name, endMarker(name))
	}
	end = start - 1 + e + 1 // keep the newline that ends the content
	if bytes.Contains(doc[end:], begin) {
		return 0, 0, fmt.Errorf("generated section %q: appears twice", name)
	}
	return start, end, nil
}

// Section returns the content of doc's generated section name.
func Section(doc []byte, name string) (string, error) {
	start, end, err := bounds(doc, name)
	if err != nil {
		return "", err
	}
	return string(doc[start:end]), nil
}

// Splice returns doc with the content of its generated section name
// replaced by content (which ends with a newline, or is made to).
func Splice(doc []byte, name, content string) ([]byte, error) {
	start, end, err := bounds(doc, name)
	if err != nil {
		return nil, err
	}
	if content != "" && !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	out := make([]byte, 0, len(doc)-(end-start)+len(content))
	out = append(out, doc[:start]...)
	out = append(out, content...)
	return append(out, doc[end:]...), nil
}

// WriteSection replaces the generated section name of the page at path
// with content.
func WriteSection(path, name, content string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := Splice(doc, name, content)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(out, doc) {
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// CheckSection returns an error, naming the page and the command that
// regenerates it, unless the page at path holds want in its generated
// section name. page is the page as the reader knows it
// (docs/configuration.md).
func CheckSection(path, page, name, want string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	got, err := Section(doc, name)
	if err != nil {
		return fmt.Errorf("%s: %w", page, err)
	}
	if !strings.HasSuffix(want, "\n") {
		want += "\n"
	}
	if got == want {
		return nil
	}
	return fmt.Errorf("%s: its %s section is out of date (%s): run `%s` and commit %s",
		page, name, firstDifference(got, want), MakeDocs, page)
}

// firstDifference names the first line where the committed section (got)
// and the generated one (want) differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the section is %q, generated %q", i+1, clip(gl), clip(wl))
		}
	}
	return "they differ"
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// Cell makes s one cell of a Markdown table: one line, `|` escaped, and
// outside code spans `<`, `>` and `*` shown as themselves rather than read
// as HTML or emphasis. An empty s is "–".
func Cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "–"
	}
	var b strings.Builder
	inCode := false
	for _, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
			b.WriteRune(r)
		case r == '|':
			b.WriteString(`\|`)
		case inCode:
			b.WriteRune(r)
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '*':
			b.WriteString(`\*`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

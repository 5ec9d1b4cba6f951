package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/docgen"
)

// TestConfigurationReferenceIsCurrent fails when docs/configuration.md's
// tables differ from the flags: a flag added, removed, renamed, given
// another default or usage without `make docs`.
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	page := filepath.Join("..", "..", "docs", "configuration.md")
	if err := docgen.CheckSection(page, "docs/configuration.md", configurationSection, configurationReference()); err != nil {
		t.Fatal(err)
	}
}

// TestConfigurationReferenceListsEveryFlag checks the generator itself:
// every flag of every command has a row, with its environment variable, and
// a default that differs in dev is shown as dev's.
func TestConfigurationReferenceListsEveryFlag(t *testing.T) {
	t.Setenv("GOGC", "77") // the reference must not show this machine's $GOGC
	ref := configurationReference()
	sets := map[string]*flag.FlagSet{}
	for _, cmd := range docCommands {
		if cmd == "dev" {
			sets[cmd], _ = devFlags()
		} else {
			sets[cmd], _, _ = serviceFlags(cmd)
		}
	}
	rows := 0
	for cmd, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			row := "| `--" + f.Name + "` | `" + config.EnvName(f.Name) + "` |"
			if !strings.Contains(ref, row) {
				t.Errorf("%s: no row for --%s (%q)", cmd, f.Name, row)
			}
			rows++
		})
	}
	if rows < 100 {
		t.Fatalf("only %d flags seen", rows)
	}
	for _, want := range []string{
		"| `--client-addr` | `GOMSG_CLIENT_ADDR` | `0.0.0.0:7100` (dev: `127.0.0.1:7100`) |",
		"| `--gc-percent` | `GOMSG_GC_PERCENT` | `100` (station: `400`; carrier: `400`) |",
		"| `--boat-id` | `GOMSG_BOAT_ID` | the hostname |",
		"| `--dead-letter-topic` | `GOMSG_DEAD_LETTER_TOPIC` | &lt;task-topic&gt;.dlq |",
		"| `--services` | `GOMSG_SERVICES` | `boat,station,carrier,horn` |",
	} {
		if !strings.Contains(ref, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
	if strings.Contains(ref, "`77`") {
		t.Error("the reference shows $GOGC's value")
	}
	if h, _ := os.Hostname(); h != "" && strings.Contains(ref, "`"+h+"`") {
		t.Errorf("the reference shows this machine's hostname %q", h)
	}
}

// TestFlagsWriteReplacesOnlyTheSection runs the hidden command as make docs
// does: the prose around the generated section stays.
func TestFlagsWriteReplacesOnlyTheSection(t *testing.T) {
	page := filepath.Join(t.TempDir(), "configuration.md")
	doc := "# Configuration\n\nhand-written\n\n" +
		"<!-- generated: configuration-reference; `make docs` rewrites it, edit the source instead -->\n" +
		"stale\n<!-- end generated: configuration-reference -->\n\nafter\n"
	if err := os.WriteFile(page, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runFlags([]string{"--markdown", "--write", page}, &out); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(page)
	want := strings.Replace(doc, "stale\n", configurationReference(), 1)
	if string(got) != want {
		t.Fatalf("wrote:\n%s", got)
	}
	if out.Len() != 0 {
		t.Fatalf("printed %q while writing", out.String())
	}
	if err := runFlags(nil, &out); err == nil {
		t.Fatal("flags without --markdown: no error")
	}
}

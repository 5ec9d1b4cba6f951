package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/docgen"
)

// configurationSection is the generated section of docs/configuration.md.
const configurationSection = "configuration-reference"

// docCommands are the commands whose flags the reference lists, services
// first: a flag's row names the services that have it, and dev only when
// no service has it.
var docCommands = []string{"boat", "station", "carrier", "horn", "dev"}

// runFlags is the hidden `gomsg flags --markdown [--write FILE]`: the
// configuration reference, made from the flags themselves so that the
// documentation cannot drift from them.
func runFlags(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("flags", flag.ContinueOnError)
	markdown := fs.Bool("markdown", false, "print the reference of every command's flags as Markdown")
	write := fs.String("write", "", "replace the generated section of this Markdown file (docs/configuration.md) instead of printing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*markdown {
		return errors.New("flags: only --markdown is supported")
	}
	ref := configurationReference()
	if *write != "" {
		return docgen.WriteSection(*write, configurationSection, ref)
	}
	_, err := io.WriteString(out, ref)
	return err
}

// docFlag is one flag as the reference shows it.
type docFlag struct {
	name     string
	usage    string
	defaults map[string]string // command → default as shown
	commands []string          // in docCommands order
}

// defaultInUsage matches the "(default X)" or "(default: X)" a usage
// string ends with when the flag's own default value is empty (a list
// filled in later).
var defaultInUsage = regexp.MustCompile(`\s*\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)$`)

// configurationReference renders every flag of gomsg's commands as
// Markdown tables, one per group of services that share them.
func configurationReference() string {
	flags := docFlags()
	groups := map[string][]*docFlag{}
	for _, f := range flags {
		k := groupOf(f.commands)
		groups[k] = append(groups[k], f)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return groupRank(keys[i]) < groupRank(keys[j]) || groupRank(keys[i]) == groupRank(keys[j]) && keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "### %s\n\n", groupTitle(k))
		b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
		for _, f := range groups[k] {
			fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.name, config.EnvName(f.name), defaultCell(f), docgen.Cell(f.usage))
		}
		b.WriteString("\n")
	}
	hc, _ := healthcheckFlags()
	b.WriteString("### gomsg healthcheck\n\n| flag | default | meaning |\n|---|---|---|\n")
	hc.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, code(f.DefValue), docgen.Cell(f.Usage))
	})
	return b.String()
}

// docFlags collects the flags of every command of docCommands, with each
// command's default. Defaults that depend on the machine (the hostname) or
// the environment ($GOGC) are shown as what they depend on.
func docFlags() []*docFlag {
	if v, ok := os.LookupEnv("GOGC"); ok {
		os.Unsetenv("GOGC")
		defer os.Setenv("GOGC", v)
	}
	host, _ := os.Hostname()
	byName := map[string]*docFlag{}
	var order []*docFlag
	for _, cmd := range docCommands {
		var fs *flag.FlagSet
		if cmd == "dev" {
			fs, _ = devFlags()
		} else {
			fs, _, _ = serviceFlags(cmd)
		}
		fs.VisitAll(func(fl *flag.Flag) {
			usage, def := fl.Usage, fl.DefValue
			if m := defaultInUsage.FindStringSubmatchIndex(usage); def == "" && m != nil {
				def, usage = "("+usage[m[2]:m[3]]+")", usage[:m[0]]
			}
			if fl.Name == "boat-id" && def == host {
				def = "(the hostname)"
			}
			f := byName[fl.Name]
			if f == nil {
				f = &docFlag{name: fl.Name, usage: usage, defaults: map[string]string{}}
				byName[fl.Name] = f
				order = append(order, f)
			}
			f.defaults[cmd] = def
			f.commands = append(f.commands, cmd)
		})
	}
	sort.Slice(order, func(i, j int) bool { return order[i].name < order[j].name })
	return order
}

// groupOf is the key of the services a flag belongs to: "boat,station", or
// "dev" for a flag only `gomsg dev` has.
func groupOf(commands []string) string {
	var svc []string
	for _, c := range commands {
		if c != "dev" {
			svc = append(svc, c)
		}
	}
	if len(svc) == 0 {
		return "dev"
	}
	return strings.Join(svc, ",")
}

// groupRank orders the tables: every service, then by the first service
// (boat, station, carrier, horn) with larger groups first, then dev.
func groupRank(k string) int {
	if k == "dev" {
		return 1000
	}
	svc := strings.Split(k, ",")
	if len(svc) == len(docCommands)-1 {
		return 0
	}
	first := 0
	for i, c := range docCommands {
		if c == svc[0] {
			first = i
		}
	}
	return 10*(first+1) - len(svc)
}

func groupTitle(k string) string {
	switch k {
	case "dev":
		return "gomsg dev only"
	case strings.Join(docCommands[:len(docCommands)-1], ","):
		return "Every service"
	}
	svc := strings.Split(k, ",")
	if len(svc) == 1 {
		return svc[0]
	}
	return strings.Join(svc[:len(svc)-1], ", ") + " and " + svc[len(svc)-1]
}

// defaultCell shows the default the services share, then where dev or a
// service differs.
func defaultCell(f *docFlag) string {
	count := map[string]int{}
	best, bestN := "", -1
	for _, c := range f.commands {
		if c == "dev" && len(f.commands) > 1 {
			continue
		}
		count[f.defaults[c]]++
	}
	for _, c := range f.commands { // first most frequent, in command order
		if n := count[f.defaults[c]]; n > bestN {
			best, bestN = f.defaults[c], n
		}
	}
	if bestN == 1 && len(count) > 1 {
		// No two services share a default: name each.
		var each []string
		for _, c := range f.commands {
			each = append(each, c+": "+code(f.defaults[c]))
		}
		return strings.Join(each, "; ")
	}
	cell := code(best)
	var others []string
	for _, c := range f.commands {
		if d := f.defaults[c]; d != best {
			others = append(others, c+": "+code(d))
		}
	}
	if len(others) > 0 {
		cell += " (" + strings.Join(others, "; ") + ")"
	}
	return cell
}

// code shows a default: empty as "–", a description in parentheses as
// text, a value as code.
func code(v string) string {
	switch {
	case v == "":
		return "–"
	case strings.HasPrefix(v, "("):
		return docgen.Cell(strings.TrimSuffix(strings.TrimPrefix(v, "("), ")"))
	}
	return "`" + strings.ReplaceAll(v, "|", `\|`) + "`"
}

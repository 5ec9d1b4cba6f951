// Package config fills service configuration from flags and GOMSG_*
// environment variables: a flag given on the command line wins, then the
// environment variable named after it (--redis-addr → GOMSG_REDIS_ADDR), then
// the default.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return "GOMSG_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then applies the environment to the flags not given.
// An environment value a flag rejects is an error naming both.
//
// A mistake on the command line (a flag that does not exist, a bad value)
// is returned as one line naming it, with the closest flag for a misspelt
// one, rather than printed with the whole usage (hundreds of lines for a
// service); -h still prints the usage.
func Parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return err
	}
	if err != nil {
		return flagError(fs, err)
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q (flag --%s): %v", EnvName(f.Name), v, f.Name, e)
			}
		}
	})
	return err
}

// List is a comma-separated flag value.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *List) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// flagError rewrites the flag package's error for a flag that does not
// exist ("flag provided but not defined: -x") to name it as it is written
// and suggest the closest flag; other errors pass as they are.
func flagError(fs *flag.FlagSet, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return err
	}
	known := make(map[string]bool)
	fs.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	msg := "unknown flag --" + name
	if s := closest(name, known, 0); s != "" {
		msg += " (did you mean --" + s + "?)"
	}
	return errors.New(msg)
}

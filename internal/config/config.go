// Package config fills service configuration from flags and GOMSG_*
// environment variables: a flag given on the command line wins, then the
// environment variable named after it (--redis-addr → GOMSG_REDIS_ADDR), then
// the default.
package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return "GOMSG_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then applies the environment to the flags not given.
// An environment value a flag rejects is an error naming both.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
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

package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
)

// registerStationSecurity adds station's credential flags: API keys and the
// JWT policy.
func registerStationSecurity(fs *flag.FlagSet, o *app.StationOptions) {
	fs.StringVar(&o.APIKeysFile, "api-keys-file", "",
		"file of Push API keys, one `<sha256-hex> <scope,scope> [name]` a line (scopes push, kickout, online, devices, broadcast, delivery, dlq, console, *), or `cert:<name> <scope,scope>` for a client certificate (--push-client-ca-file); re-read when it changes")
	fs.DurationVar(&o.APIKeysGrace, "api-keys-grace", apikey.DefaultGrace,
		"how long the keys of an --api-keys-file that was deleted, emptied or broken stay in force (an ERROR is logged at once); after it they are dropped")
	fs.StringVar(&o.APIKeys, "api-keys", "",
		"Push API key lines as in --api-keys-file, separated by ';' (set GOMSG_API_KEYS rather than the flag: a command line shows in ps)")
	fs.StringVar(&o.PushClientCAFile, "push-client-ca-file", "",
		"PEM CA bundle: backends may authenticate to the Push API with a client certificate it signed, instead of a key, given a `cert:<name>` line (needs --tls-cert-file)")
	fs.StringVar(&o.JWTSecretFile, "jwt-secret-file", "", "file holding the HS256 secret of device tokens (instead of --jwt-secret)")
	fs.Var(inverted{&o.JWTAllowNoExp}, "jwt-require-exp", "refuse device tokens without an exp claim (default true)")
}

// registerInternal adds the internal token's flags (boat, station, carrier).
func registerInternal(fs *flag.FlagSet, a *app.InternalAuth) {
	fs.StringVar(&a.TokenFile, "internal-token-file", "", "file holding the token boat, station and carrier send each other (the same on all)")
	fs.StringVar(&a.Token, "internal-token", "",
		"the internal token itself (set GOMSG_INTERNAL_TOKEN rather than the flag: a command line shows in ps)")
	fs.BoolVar(&a.Insecure, "insecure-internal", false, "run the internal APIs without a token (anyone who reaches them can call them)")
}

// inverted is a bool flag that sets the negation of its field, so that a
// field's zero value is the secure default.
type inverted struct{ p *bool }

func (v inverted) String() string {
	if v.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*v.p)
}

func (v inverted) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = !b
	return nil
}

func (inverted) IsBoolFlag() bool { return true }

// runKeygen prints a new random API key and its line for --api-keys-file.
func runKeygen(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	scopes := fs.String("scopes", "push", "scopes of the key, comma-separated: push, kickout, online, devices, broadcast, delivery, dlq, console, *")
	name := fs.String("name", "", "a name for the key (shown in logs), no spaces")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gomsg keygen [--scopes push,online] [--name backend-1]\n"+
			"prints a new API key (line 1: give it to the backend) and its line for --api-keys-file or GOMSG_API_KEYS (line 2)\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc, err := apikey.ParseScopes(*scopes)
	if err != nil {
		return fmt.Errorf("--scopes: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, r := range *name {
		if r == ' ' || r == '\t' || r == '#' || r == ';' {
			return fmt.Errorf("--name: %q: no spaces, '#' or ';'", *name)
		}
	}
	key, err := apikey.Generate()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n%s\n", key, apikey.Line(key, sc, *name))
	return err
}

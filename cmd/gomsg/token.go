package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gomsg/gomsg/client/token"
	"github.com/gomsg/gomsg/internal/auth"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// runToken prints a device token for ops and tests. The secret comes from
// GOMSG_JWT_SECRET or --jwt-secret-file, never from the command line (where
// other users of the host and the shell's history would see it); --dev
// signs with `gomsg dev`'s public secret.
func runToken(args []string, getenv func(string) string, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	uid := fs.String("uid", "", "the user the device belongs to (required)")
	platform := fs.String("platform", "", "the device's platform, one of station's --platforms (required)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid")
	file := fs.String("jwt-secret-file", "", "a file holding the secret (default: $GOMSG_JWT_SECRET)")
	dev := fs.Bool("dev", false, "sign with the public secret of `gomsg dev`")
	var rooms stringList
	fs.Var(&rooms, "room", "a room the session may join: a name, a prefix ending in '*', or '*' (repeat for more)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: gomsg token --uid U --platform P [--room R …] [--ttl D] [--jwt-secret-file F | --dev]\n"+
			"Prints a device token signed with $GOMSG_JWT_SECRET (or --jwt-secret-file).\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *uid == "" || *platform == "" {
		return errors.New("--uid and --platform are required")
	}
	secret := getenv("GOMSG_JWT_SECRET")
	switch {
	case *dev && (*file != "" || secret != ""):
		return errors.New("--dev signs with the public dev secret: unset GOMSG_JWT_SECRET and --jwt-secret-file")
	case *dev:
		secret = auth.DevSecret
	default:
		var err error
		if secret, err = auth.JWTSecret(secret, *file, false); err != nil {
			return err
		}
	}
	tok, err := token.Mint(secret, *uid, *platform, rooms, *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, tok)
	return err
}

// osToken runs runToken on the process's environment and streams.
func osToken(args []string) error { return runToken(args, os.Getenv, os.Stdout, os.Stderr) }

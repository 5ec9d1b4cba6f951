package app

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// DevAPIKey is the Push API key `gomsg dev` accepts and gomsgctl sends by
// default. It is public: every service but `gomsg dev` refuses it.
const DevAPIKey = apikey.DevKey

// InternalAuth is the shared credential of the internal APIs (carrier →
// boat, boat → station).
type InternalAuth struct {
	// Token is the token itself (GOMSG_INTERNAL_TOKEN).
	Token string
	// TokenFile holds the token (--internal-token-file).
	TokenFile string
	// Insecure runs without a token outside dev (--insecure-internal).
	Insecure bool
}

// Resolve returns the token to use: from the file or the value; in dev a
// random one when none is given; outside dev an error unless Insecure.
func (a InternalAuth) Resolve(dev bool, log *zap.Logger) (string, error) {
	tok := a.Token
	if a.TokenFile != "" {
		if tok != "" {
			return "", errors.New("--internal-token-file and GOMSG_INTERNAL_TOKEN: set one, not both")
		}
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("--internal-token-file: %w", err)
		}
		if tok = strings.TrimSpace(string(b)); tok == "" {
			return "", fmt.Errorf("--internal-token-file %s: empty", a.TokenFile)
		}
	}
	switch {
	case tok != "" && !dev && len(tok) < auth.MinInternalToken:
		return "", fmt.Errorf("--internal-token-file / GOMSG_INTERNAL_TOKEN: %d bytes, must be at least %d", len(tok), auth.MinInternalToken)
	case tok != "":
		return tok, nil
	case dev:
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	case a.Insecure:
		log.Warn("--insecure-internal: the internal APIs accept calls from anyone who can reach them; set --internal-token-file or GOMSG_INTERNAL_TOKEN")
		return "", nil
	}
	return "", errors.New("no internal token: set --internal-token-file or GOMSG_INTERNAL_TOKEN (the same on every boat, station and carrier), or --insecure-internal")
}

// usesInternal reports whether services include one that serves or calls an
// internal API.
func usesInternal(services []string) bool {
	return slices.ContainsFunc(services, func(s string) bool { return s == "boat" || s == "station" || s == "carrier" })
}

// stationAuth builds station's device-token verifier and API keys.
func stationAuth(o StationOptions, cert *tlsx.Reloader, log *zap.Logger) (auth.Authenticator, *apikey.Store, error) {
	keys, err := apikey.NewStore(apikey.Config{Keys: o.APIKeys, File: o.APIKeysFile, Dev: o.dev, Grace: o.APIKeysGrace}, log)
	if err != nil {
		return nil, nil, err
	}
	if o.AuthAddr != "" {
		tc, err := o.authTransport(cert)
		if err != nil {
			return nil, nil, err
		}
		conn, err := grpcx.Dial(o.AuthAddr, grpcx.WithTLS(tc))
		if err != nil {
			return nil, nil, fmt.Errorf("--auth-addr %q: %w", o.AuthAddr, err)
		}
		return auth.NewRemote(conn), keys, nil
	}
	secret, err := auth.JWTSecret(o.JWTSecret, o.JWTSecretFile, o.dev)
	if err != nil {
		return nil, nil, err
	}
	if secret == "" {
		return nil, nil, errors.New("--jwt-secret: must be set (or --auth-addr)")
	}
	return auth.NewJWT(secret, !o.JWTAllowNoExp), keys, nil
}

// secure checks the credentials before any backend is dialed: station's
// API keys and JWT secret, and the internal token.
func (cfg *ClusterConfig) secure(cert *tlsx.Reloader, log *zap.Logger) error {
	cfg.Station.dev = cfg.Dev
	if slices.Contains(cfg.Services, "station") {
		var err error
		if cfg.Station.authn, cfg.Station.keys, err = stationAuth(cfg.Station, cert, log); err != nil {
			return err
		}
	}
	if !usesInternal(cfg.Services) {
		return nil
	}
	tok, err := cfg.Internal.Resolve(cfg.Dev, log)
	if err != nil {
		return err
	}
	cfg.Backends.internalToken = tok
	return nil
}

package auth

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// DevJWTSecret is the JWT secret `gomsg dev` and gomsgctl default to. It is
// public: every service but `gomsg dev` refuses it.
const DevJWTSecret = "gomsg-dev-secret-do-not-use-in-production"

// MinJWTSecret is the shortest HS256 secret accepted outside dev (256 bits,
// the hash's size; RFC 7518 §3.2).
const MinJWTSecret = 32

// JWTSecret resolves the device-token secret from --jwt-secret or
// --jwt-secret-file and checks it: outside dev it must be at least
// MinJWTSecret bytes and not the public dev secret.
func JWTSecret(secret, file string, dev bool) (string, error) {
	if file != "" {
		if secret != "" && secret != DevJWTSecret {
			return "", errors.New("--jwt-secret and --jwt-secret-file: set one, not both")
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--jwt-secret-file: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
		if secret == "" {
			return "", fmt.Errorf("--jwt-secret-file %s: empty", file)
		}
	}
	if dev {
		return secret, nil
	}
	switch {
	case secret == "":
		return "", errors.New("--jwt-secret: must be set (or --jwt-secret-file, GOMSG_JWT_SECRET, or --auth-addr)")
	case secret == DevJWTSecret:
		return "", errors.New("--jwt-secret: the public dev secret is only accepted by `gomsg dev`")
	case len(secret) < MinJWTSecret:
		return "", fmt.Errorf("--jwt-secret: %d bytes, must be at least %d (e.g. `openssl rand -base64 48`)", len(secret), MinJWTSecret)
	}
	return secret, nil
}

package token_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gomsg/gomsg/client/token"
)

const secret = "token-test-secret-at-least-32-bytes-long"

func TestMintVerify(t *testing.T) {
	t.Parallel()
	tok, err := token.Mint(secret, "alice", "ios", []string{"news", "match-*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := token.Verify(secret, tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.UID != "alice" || c.Platform != "ios" || strings.Join(c.Rooms, ",") != "news,match-*" {
		t.Fatalf("claims %+v", c)
	}
	if d := time.Until(c.ExpiresAt.Time); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("expires in %s, want 1h", d)
	}
}

// Mint refuses what station would refuse or what could never be revoked.
func TestMintRefuses(t *testing.T) {
	t.Parallel()
	for name, mint := range map[string]func() (string, error){
		"short secret": func() (string, error) { return token.Mint("short", "u", "ios", nil, time.Hour) },
		"no uid":       func() (string, error) { return token.Mint(secret, "", "ios", nil, time.Hour) },
		"no platform":  func() (string, error) { return token.Mint(secret, "u", "", nil, time.Hour) },
		"no expiry":    func() (string, error) { return token.Mint(secret, "u", "ios", nil, 0) },
		"expired":      func() (string, error) { return token.Mint(secret, "u", "ios", nil, -time.Second) },
	} {
		if tok, err := mint(); err == nil {
			t.Errorf("%s: minted %q, want an error", name, tok)
		}
	}
}

// Verify refuses every token station refuses for its signature, algorithm,
// time or missing claims.
func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	now := time.Now()
	claims := func(uid, platform string, exp time.Time) token.Claims {
		c := token.Claims{UID: uid, Platform: platform}
		if !exp.IsZero() {
			c.ExpiresAt = jwt.NewNumericDate(exp)
		}
		return c
	}
	sign := func(c token.Claims) string {
		tok, err := token.Sign(secret, c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, claims("u", "ios", now.Add(time.Hour))).SignedString([]byte(secret))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims("u", "ios", now.Add(time.Hour))).SignedString(jwt.UnsafeAllowNoneSignatureType)
	other, _ := token.Mint(strings.Repeat("x", 32), "u", "ios", nil, time.Hour)
	notYet := claims("u", "ios", now.Add(time.Hour))
	notYet.NotBefore = jwt.NewNumericDate(now.Add(time.Minute))
	for name, tok := range map[string]string{
		"empty":                     "",
		"garbage":                   "not.a.token",
		"another secret":            other,
		"HS512":                     hs512,
		"alg none":                  none,
		"expired beyond the leeway": sign(claims("u", "ios", now.Add(-token.Leeway-2*time.Second))),
		"not valid yet":             sign(notYet),
		"no exp":                    sign(claims("u", "ios", time.Time{})),
		"no uid":                    sign(claims("", "ios", now.Add(time.Hour))),
		"no platform":               sign(claims("u", "", now.Add(time.Hour))),
	} {
		if c, err := token.Verify(secret, tok); !errors.Is(err, token.ErrInvalid) {
			t.Errorf("%s: Verify = %+v, %v; want ErrInvalid", name, c, err)
		}
	}
	// Within the leeway, and without exp when not required.
	if _, err := token.Verify(secret, sign(claims("u", "ios", now.Add(-time.Second)))); err != nil {
		t.Errorf("expired 1 s ago (leeway %s): %v", token.Leeway, err)
	}
	if _, err := token.NewVerifier(secret, false).Verify(sign(claims("u", "ios", time.Time{}))); err != nil {
		t.Errorf("no exp, not required: %v", err)
	}
}

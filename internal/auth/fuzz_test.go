package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gomsg/gomsg/internal/room"
)

const fuzzSecret = "fuzz-secret-0123456789-0123456789-abcdef"

// FuzzJWTAuthenticate checks the device-token parser: arbitrary text is
// refused with ErrInvalidToken unless it is a token signed with the secret;
// a minted token names its uid and platform; any change to one is refused.
func FuzzJWTAuthenticate(f *testing.F) {
	good, _ := Mint(fuzzSecret, "alice", "ios", time.Hour)
	f.Add(good, "alice", "ios", 0)
	f.Add("", "u", "web", 3)
	f.Add("a.b.c", "u", "web", 10)
	f.Add("eyJhbGciOiJub25lIn0.eyJ1aWQiOiJ4IiwicGxhdGZvcm0iOiJ5In0.", "x", "y", 1)
	j := NewJWT(fuzzSecret, true)
	f.Fuzz(func(t *testing.T, token, uid, platform string, flip int) {
		ctx := context.Background()
		if _, err := j.Authenticate(ctx, token); err != nil && !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("Authenticate(%q): %v is not ErrInvalidToken", token, err)
		}
		if !utf8.ValidString(uid) || !utf8.ValidString(platform) {
			return // JSON carries only UTF-8 claims
		}
		minted, err := Mint(fuzzSecret, uid, platform, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		id, err := j.Authenticate(ctx, minted)
		switch {
		case uid == "" || platform == "":
			if err == nil {
				t.Fatalf("accepted a token without uid or platform: %+v", id)
			}
			return
		case err != nil:
			t.Fatalf("minted token for %q/%q refused: %v", uid, platform, err)
		case id.UID != uid || id.Platform != platform:
			t.Fatalf("minted %q/%q, read %+v", uid, platform, id)
		}
		if _, err := NewJWT(fuzzSecret+"x", true).Authenticate(ctx, minted); err == nil {
			t.Fatal("a token signed with another secret was accepted")
		}
		// Change one character of the signature: refused.
		dot := strings.LastIndexByte(minted, '.')
		sig := []byte(minted[dot+1:])
		if len(sig) == 0 {
			t.Fatal("minted token has no signature")
		}
		i := (flip%len(sig) + len(sig)) % len(sig)
		orig := sig[i]
		sig[i] = 'A'
		if orig == 'A' {
			sig[i] = 'B'
		}
		tampered := minted[:dot+1] + string(sig)
		if id, err := j.Authenticate(ctx, tampered); err == nil {
			// Base64url's last character may carry unused bits; only a
			// change that decodes to the same bytes could pass.
			if i != len(sig)-1 {
				t.Fatalf("tampered token accepted as %+v", id)
			}
		}
	})
}

// FuzzJWTRooms mints tokens with arbitrary rooms claims (rooms separated by
// ','): a token is accepted exactly when its claim passes
// room.CheckPatterns, and then carries the rooms as minted.
func FuzzJWTRooms(f *testing.F) {
	for _, s := range []string{"", "lobby", "lobby,match-*", "*", "a b", "a*b", "a**", ",", "caf\u00e9", "x\x00", strings.Repeat("r", 129)} {
		f.Add(s)
	}
	j := NewJWT(fuzzSecret, true)
	f.Fuzz(func(t *testing.T, claim string) {
		if !utf8.ValidString(claim) {
			return // JSON carries only UTF-8 claims
		}
		var rooms []string
		if claim != "" {
			rooms = strings.Split(claim, ",")
		}
		tok, err := Mint(fuzzSecret, "alice", "ios", time.Hour, rooms...)
		if err != nil {
			t.Fatal(err)
		}
		id, err := j.Authenticate(context.Background(), tok)
		if want := room.CheckPatterns(rooms); want != nil {
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "rooms claim") {
				t.Fatalf("rooms %q (%v): %+v, %v; want refused naming the rooms claim", rooms, want, id, err)
			}
			return
		}
		if err != nil || !slices.Equal(id.Rooms, rooms) {
			t.Fatalf("rooms %q: %+v, %v; want them accepted", rooms, id, err)
		}
	})
}

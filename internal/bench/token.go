package bench

import (
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gomsg/gomsg/internal/auth"
)

// roomClaims are auth.Claims with the "rooms" claim; auth.Mint does not
// take rooms yet.
type roomClaims struct {
	auth.Claims
	Rooms []string `json:"rooms,omitempty"`
}

// mintToken signs a session's token, valid for a day, that may join rooms.
func mintToken(secret, uid, platform string, rooms []string) (string, error) {
	if len(rooms) == 0 {
		return auth.Mint(secret, uid, platform, 24*time.Hour)
	}
	now := time.Now()
	c := roomClaims{Claims: auth.Claims{UID: uid, Platform: platform}, Rooms: rooms}
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(now.Add(24 * time.Hour))
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
}

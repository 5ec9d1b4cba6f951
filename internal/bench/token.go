package bench

import (
	"time"

	"github.com/gomsg/gomsg/internal/auth"
)

// mintToken signs a session's token, valid for a day, that may join rooms.
func mintToken(secret, uid, platform string, rooms []string) (string, error) {
	return auth.Mint(secret, uid, platform, 24*time.Hour, rooms...)
}

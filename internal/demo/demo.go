// Package demo serves the browser demo of `gomsg dev`: a static page (the
// @gomsg/client bundle from clients/js, built by `make js` and committed
// under static/) that connects as a web device over boat's WebSocket, and a
// token endpoint that mints device tokens with the public dev JWT secret.
package demo

import (
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/gomsg/gomsg/internal/auth"
)

//go:embed static
var static embed.FS

const (
	// Platform is the platform of the tokens the demo mints.
	Platform = "web"
	// TokenTTL is how long a minted token is valid.
	TokenTTL = time.Hour
	// maxUID bounds the uid a token is minted for.
	maxUID = 128
	// maxBody bounds a token request's body.
	maxBody = 4 << 10
)

// Handler serves the demo page at "/" (with /demo.css and /gomsg-demo.js)
// and POST /dev/token {"uid": "..."} → {"token", "uid", "platform",
// "expires_at"}: a JWT for platform web, minted with secret, valid for
// TokenTTL, that may join every room.
//
// The token endpoint lets anyone who reaches it act as any user. Only
// `gomsg dev` mounts this handler, and only when its JWT secret is the public
// dev secret (auth.DevSecret), on boat's WebSocket listener so the page and
// /v1/connect share an origin. As a second guard, the endpoint refuses (403)
// to mint with any other secret; the page then asks for a pasted token.
func Handler(secret string) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServer(http.FS(sub))
	mux := http.NewServeMux()
	mux.Handle("POST /dev/token", tokenHandler(secret))
	mux.HandleFunc("/dev/token", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "use POST")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.HandleFunc("GET /demo.css", func(w http.ResponseWriter, r *http.Request) { headers(w); files.ServeHTTP(w, r) })
	mux.HandleFunc("GET /gomsg-demo.js", func(w http.ResponseWriter, r *http.Request) { headers(w); files.ServeHTTP(w, r) })
	return mux
}

// headers sets what every page response carries: no caching (the bundle
// changes with the binary), no sniffing, and a policy that lets the page
// load only its own files and open WebSockets.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; frame-ancestors 'none'")
}

type tokenRequest struct {
	UID string `json:"uid"`
}

type tokenResponse struct {
	Token     string    `json:"token"`
	UID       string    `json:"uid"`
	Platform  string    `json:"platform"`
	ExpiresAt time.Time `json:"expires_at"`
}

func tokenHandler(secret string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if secret != auth.DevSecret {
			writeError(w, http.StatusForbidden, "the demo mints tokens only with the public dev JWT secret; paste a token instead")
			return
		}
		var req tokenRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, http.StatusRequestEntityTooLarge, "body: larger than 4 KiB")
				return
			}
			writeError(w, http.StatusBadRequest, "body: want JSON {\"uid\": \"...\"}: "+err.Error())
			return
		}
		if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
			writeError(w, http.StatusBadRequest, "body: want one JSON object")
			return
		}
		if err := checkUID(req.UID); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		tok, err := auth.Mint(secret, req.UID, Platform, TokenTTL, "*")
		if err != nil {
			writeError(w, http.StatusInternalServerError, "minting the token failed")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, tokenResponse{Token: tok, UID: req.UID, Platform: Platform, ExpiresAt: time.Now().Add(TokenTTL).UTC().Truncate(time.Second)})
	})
}

// checkUID accepts 1 to 128 bytes of printable ASCII without spaces.
func checkUID(uid string) error {
	if uid == "" {
		return errors.New("uid: required")
	}
	if len(uid) > maxUID {
		return errors.New("uid: longer than 128 bytes")
	}
	if i := strings.IndexFunc(uid, func(c rune) bool { return c <= ' ' || c > '~' }); i >= 0 {
		return errors.New("uid: only printable ASCII without spaces")
	}
	return nil
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

package station

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/errorpb"
)

// HTTPLimits bound what one caller can make the HTTP/JSON Push API hold.
type HTTPLimits struct {
	// MaxBodyBytes is the largest request body (--http-max-body-bytes);
	// larger ones are answered 413, whether sized by Content-Length or
	// chunked.
	MaxBodyBytes int64
	// ReadTimeout bounds reading a whole request, body included
	// (--http-read-timeout): a slow body is cut off with 408.
	ReadTimeout time.Duration
	// ReadHeaderTimeout bounds reading the request header
	// (--http-read-header-timeout).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle that long
	// (--http-idle-timeout).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request header (--http-max-header-bytes);
	// net/http answers 431 beyond it.
	MaxHeaderBytes int
}

// Defaults fills unset fields.
func (l *HTTPLimits) Defaults() {
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = 2 << 20
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = 30 * time.Second
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = 2 * time.Minute
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 64 << 10
	}
}

// Validate names the first bad setting.
func (l *HTTPLimits) Validate() error {
	switch {
	case l.MaxBodyBytes < 1:
		return fmt.Errorf("--http-max-body-bytes: %d, must be positive", l.MaxBodyBytes)
	case l.ReadTimeout < 0:
		return fmt.Errorf("--http-read-timeout: %s, must be positive", l.ReadTimeout)
	case l.ReadHeaderTimeout < 0:
		return fmt.Errorf("--http-read-header-timeout: %s, must be positive", l.ReadHeaderTimeout)
	case l.IdleTimeout < 0:
		return fmt.Errorf("--http-idle-timeout: %s, must be positive", l.IdleTimeout)
	case l.MaxHeaderBytes < 1024:
		return fmt.Errorf("--http-max-header-bytes: %d, must be at least 1024", l.MaxHeaderBytes)
	}
	return nil
}

// httpServer is the HTTP/JSON Push API's server with its limits: timeouts
// and header size in the server, the body limit around h.
func (s *Station) httpServer(h http.Handler) *http.Server {
	l := s.cfg.HTTP
	return &http.Server{
		Handler:           h, // the body limit is a layer of httpHandler
		ReadTimeout:       l.ReadTimeout,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// limitBody reads the request body (at most MaxBodyBytes) before h runs:
// a larger body is answered 413, a body not read within the read timeout
// 408, and h never sees a partial body.
func (s *Station) limitBody(h http.Handler) http.Handler {
	max := s.cfg.HTTP.MaxBodyBytes
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			s.httpRefuse(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "http_max_body_bytes",
				fmt.Sprintf("request body is %d bytes, at most %d (--http-max-body-bytes)", r.ContentLength, max))
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			s.httpRefuse(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "http_max_body_bytes",
				fmt.Sprintf("request body exceeds %d bytes (--http-max-body-bytes)", max))
			return
		case errors.As(err, &netErr) && netErr.Timeout():
			s.httpRefuse(w, http.StatusRequestTimeout, codes.DeadlineExceeded, "http_read_timeout",
				fmt.Sprintf("request body not received within %s (--http-read-timeout)", s.cfg.HTTP.ReadTimeout))
			return
		case err != nil:
			http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		h.ServeHTTP(w, r)
	})
}

// httpRefuse answers a request refused by a limit in the API's error shape
// (writeHTTPError, with the errorpb LIMIT_EXCEEDED detail) and closes the
// connection (the rest of its body is not read).
func (s *Station) httpRefuse(w http.ResponseWriter, httpCode int, code codes.Code, limit, msg string) {
	s.metrics.LimitRejections.WithLabelValues(limit).Inc()
	w.Header().Set("Connection", "close")
	err := grpcerr.Status(&grpcerr.Error{Code: code, Detail: errorpb.Code_LIMIT_EXCEEDED, Msg: msg})
	writeHTTPError(w, httpCode, status.Convert(err))
}

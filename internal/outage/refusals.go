package outage

import (
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// RefusalBurst is how many refusals a Refusals logs at once before it logs
// one a second.
const RefusalBurst = 10

// Refusals writes a WARN line per refused request — who asked and why,
// never the credential — at most RefusalBurst at once and one a second
// after that, so that a flood of bad requests cannot flood the log; the
// next line written says how many were left out. It is safe for
// concurrent use.
type Refusals struct {
	log   *zap.Logger
	msg   string
	limit *rate.Limiter
	left  atomic.Int64
}

// NewRefusals returns a Refusals writing msg to log.
func NewRefusals(log *zap.Logger, msg string) *Refusals {
	return &Refusals{log: log, msg: msg, limit: rate.NewLimiter(1, RefusalBurst)}
}

// Log writes one refusal's line, unless the rate says to leave it out.
func (r *Refusals) Log(fields ...zap.Field) {
	if !r.limit.Allow() {
		r.left.Add(1)
		return
	}
	if n := r.left.Swap(0); n > 0 {
		fields = append(fields, zap.Int64("not_logged_before", n))
	}
	r.log.Warn(r.msg, fields...)
}

package boat

import (
	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/internal/auth"
)

// internalAuth is the internal server's option: carrier must send the
// cluster's internal token.
func (b *Boat) internalAuth() grpc.ServerOption {
	return auth.InternalServerOption(b.cfg.InternalToken, func(reason string) {
		b.metrics.AuthFailures.WithLabelValues("boat_internal", reason).Inc()
	})
}

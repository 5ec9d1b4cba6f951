package boat

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/outage"
)

// internalAuth is the internal server's option: carrier must send the
// cluster's internal token.
func (b *Boat) internalAuth() grpc.ServerOption {
	refusals := outage.NewRefusals(b.log, "internal API call refused")
	return auth.InternalServerOption(b.cfg.InternalToken, func(ctx context.Context, info *tap.Info, reason string) {
		b.metrics.AuthFailures.WithLabelValues("boat_internal", reason).Inc()
		refusals.Log(auth.RefusalFields(ctx, info, reason)...)
	})
}

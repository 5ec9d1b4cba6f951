package station

import (
	"context"
	"net/http"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/outage"
)

// pushMethodScopes is the scope each Push API method needs (gRPC method
// names and their HTTP/JSON paths).
var pushMethodScopes = map[string]apikey.Scope{
	"/gomsg.push.Push/Push":               apikey.Push,
	"/gomsg.push.Push/Kickout":            apikey.Kickout,
	"/gomsg.push.Push/Online":             apikey.Online,
	"/gomsg.push.Push/RegisterDevice":     apikey.Devices,
	"/gomsg.push.Push/UnregisterDevice":   apikey.Devices,
	"/gomsg.push.Push/ListDevices":        apikey.Devices,
	"/gomsg.push.Push/BroadcastRoom":      apikey.Broadcast,
	"/gomsg.push.Push/BroadcastAll":       apikey.Broadcast,
	"/gomsg.push.Push/RoomOnline":         apikey.Online,
	"/gomsg.push.Push/GetDelivery":        apikey.Delivery,
	"/gomsg.push.Push/ListDeadLetters":    apikey.DLQ,
	"/gomsg.push.Push/GetDeadLetter":      apikey.DLQ,
	"/gomsg.push.Push/RedriveDeadLetters": apikey.DLQ,
	"/gomsg.push.Push/PurgeDeadLetters":   apikey.DLQ,
	"/v1/push":                            apikey.Push,
	"/v1/kickout":                         apikey.Kickout,
	"/v1/online":                          apikey.Online,
	"/v1/devices/register":                apikey.Devices,
	"/v1/devices/unregister":              apikey.Devices,
	"/v1/devices/list":                    apikey.Devices,
	"/v1/broadcast/room":                  apikey.Broadcast,
	"/v1/broadcast/all":                   apikey.Broadcast,
	"/v1/rooms/online":                    apikey.Online,
	"/v1/delivery":                        apikey.Delivery,
	"/v1/dlq/list":                        apikey.DLQ,
	"/v1/dlq/show":                        apikey.DLQ,
	"/v1/dlq/redrive":                     apikey.DLQ,
	"/v1/dlq/purge":                       apikey.DLQ,
}

// pushScope is the scope a Push API call needs. Health, server reflection
// and the OpenAPI document stay open (they reveal the schema and whether
// station serves, nothing more); anything else unknown needs a key with
// every scope.
func pushScope(method string) (apikey.Scope, bool) {
	if s, ok := pushMethodScopes[method]; ok {
		return s, false
	}
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.") ||
		method == "/openapi.json" {
		return "", true
	}
	return apikey.All, false
}

func (s *Station) pushGuard(api string) *apikey.Guard {
	return &apikey.Guard{Keys: s.cfg.APIKeys, ScopeOf: pushScope, WriteHTTPError: writeHTTPError, OnFail: func(reason string) {
		s.metrics.AuthFailures.WithLabelValues(api, reason).Inc()
	}, Log: s.log.With(zap.String("api", api))}
}

// pushAuth is the Push API's gRPC server option: the key check in a tap.
func (s *Station) pushAuth() grpc.ServerOption { return s.pushGuard("push_grpc").ServerOption() }

// requireAPIKey wraps the HTTP/JSON gateway with the key check.
func (s *Station) requireAPIKey(h http.Handler) http.Handler { return s.pushGuard("push_http").HTTP(h) }

// internalAuth is the internal server's option: boats must send the
// cluster's internal token.
func (s *Station) internalAuth() grpc.ServerOption {
	refusals := outage.NewRefusals(s.log, "internal API call refused")
	return auth.InternalServerOption(s.cfg.InternalToken, func(ctx context.Context, info *tap.Info, reason string) {
		s.metrics.AuthFailures.WithLabelValues("station_internal", reason).Inc()
		refusals.Log(auth.RefusalFields(ctx, info, reason)...)
	})
}

// Package tracing carries OpenTelemetry traces from the Push API through
// Kafka (W3C trace context in record headers) to the boat delivery, and
// exports them by OTLP when an endpoint is configured.
package tracing

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

const scope = "github.com/gomsg/gomsg"

// enabled is set once traces go somewhere; until then the gRPC handlers are
// not installed at all (they cost ~10 % of carrier's CPU even when every
// span is dropped). Like otel's own providers, it is process-wide.
var enabled atomic.Bool

// Enable turns on the gRPC instrumentation of services built afterwards;
// Setup calls it when an endpoint is configured, tests that record spans
// call it themselves.
func Enable() { enabled.Store(true) }

// Enabled reports whether Enable was called.
func Enabled() bool { return enabled.Load() }

// Setup installs the W3C trace-context propagator and, when endpoint is set,
// a tracer provider exporting to that OTLP/gRPC endpoint in batches. Without
// an endpoint, spans are not recorded. shutdown flushes what is pending.
func Setup(ctx context.Context, service, endpoint string, insecure bool) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(endpoint)}
	if insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp-endpoint %q: %w", endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("gomsg-"+service))))
	otel.SetTracerProvider(tp)
	Enable()
	return tp.Shutdown, nil
}

// Tracer is gomsg's tracer.
func Tracer() trace.Tracer { return otel.Tracer(scope) }

// Start starts a span of kind on gomsg's tracer, for the paths every message
// takes. Before Enable no provider records spans, so none is started at all:
// ctx keeps the trace context it carries, which is what a non-recording span
// would pass on, and the span returned does nothing. That saves the span and
// context allocations on every message.
func Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, noop.Span{}
	}
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind))
}

// Inject writes ctx's trace context into record headers.
func Inject(ctx context.Context, headers map[string]string) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(headers))
}

// Extract returns ctx carrying the trace context found in record headers.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(headers))
}

// ServerOption traces a gRPC server's calls when tracing is enabled.
func ServerOption() grpc.ServerOption {
	if !enabled.Load() {
		return grpc.EmptyServerOption{}
	}
	return grpc.StatsHandler(otelgrpc.NewServerHandler())
}

// DialOption traces a gRPC client's calls when tracing is enabled.
func DialOption() grpc.DialOption {
	if !enabled.Load() {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler())
}

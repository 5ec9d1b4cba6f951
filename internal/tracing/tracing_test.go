package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestStartPassesTheTraceOnEitherWay: before Enable, Start starts no span
// yet the records written under it carry the same trace context as under a
// span of the (non-recording) global tracer; after Enable it records a span
// that is a child of the incoming trace. Not parallel: Enable and the
// provider are process-wide.
func TestStartPassesTheTraceOnEitherWay(t *testing.T) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := Extract(context.Background(), map[string]string{"traceparent": parent})

	ctx, span := Start(in, "t.off", 0)
	if span.IsRecording() {
		t.Fatal("span records before Enable")
	}
	span.End()
	got, want := map[string]string{}, map[string]string{}
	Inject(ctx, got)
	gctx, gspan := Tracer().Start(in, "t.global")
	Inject(gctx, want)
	gspan.End()
	if got["traceparent"] != parent || got["traceparent"] != want["traceparent"] {
		t.Fatalf("traceparent passed on before Enable: %q, want %q (the global tracer's %q)", got["traceparent"], parent, want["traceparent"])
	}

	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	Enable()
	ctx, span = Start(in, "t.on", 0)
	if !span.IsRecording() {
		t.Fatal("span does not record after Enable")
	}
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "t.on" || ended[0].Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("spans recorded after Enable: %d, want one child of the incoming trace", len(ended))
	}
	after := map[string]string{}
	Inject(ctx, after)
	if after["traceparent"] == parent || after["traceparent"][:35] != parent[:35] {
		t.Fatalf("traceparent after Enable: %q, want the same trace with the new span's id", after["traceparent"])
	}
}

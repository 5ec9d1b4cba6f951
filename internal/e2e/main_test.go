package e2e

import (
	"flag"
	"os"
	"runtime"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gomsg/gomsg/internal/tracing"
)

// spans records every span the in-process clusters make; tests find theirs
// by trace id.
var spans = tracetest.NewSpanRecorder()

func TestMain(m *testing.M) {
	flag.Parse()
	// The scenarios spend most of their time waiting for deliveries and
	// timeouts, not on the CPU: run four at a time even on two cores (the
	// default is GOMAXPROCS), unless -parallel says otherwise. Every
	// scenario runs on Kafka and on NATS, and this keeps the package's time
	// below what it was with half of them at the default.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet && runtime.GOMAXPROCS(0) < 4 {
		_ = flag.Set("test.parallel", "4")
	}
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tracing.Enable()
	os.Exit(m.Run())
}

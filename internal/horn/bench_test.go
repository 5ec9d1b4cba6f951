package horn_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"

	"github.com/sideshow/apns2"
	"github.com/sideshow/apns2/token"
	"go.uber.org/zap"
	"golang.org/x/net/http2"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/horn/horntest"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/notification"
	"github.com/gomsg/gomsg/internal/platform"
)

// BenchmarkAPNsThroughput compares horn's send path (provider lookup,
// concurrency bound, payload and headers built per send, metrics) with a
// bare apns2 client sending the same pre-built request, both to the same
// HTTP/2 TLS mock in the same run, with the same parallelism.
//
//	go test -run '^$' -bench BenchmarkAPNsThroughput -benchtime 20000x -count 3 ./internal/horn/
func BenchmarkAPNsThroughput(b *testing.B) {
	a := horntest.StartAPNs(b)
	a.DiscardRequests()
	dev := device.Device{UID: "bench", Platform: "ios", Provider: "apns", Token: "be9c4"}
	c := content()
	b.Run("horn", func(b *testing.B) {
		h, err := horn.New(horn.Config{Brokers: []string{"127.0.0.1:1"}, Platforms: platform.MustParse("ios:notify=apns"),
			Concurrency: 64, APNs: apnsConfig(a)}, zap.NewNop(), metrics.New(), device.New(nil), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, err := h.Send(context.Background(), dev, c)
				if err != nil || r.Verdict != horn.Sent {
					b.Errorf("send: %+v %v", r, err)
					return
				}
			}
		})
	})
	b.Run("bare-apns2", func(b *testing.B) {
		key, err := token.AuthKeyFromFile(a.KeyFile)
		if err != nil {
			b.Fatal(err)
		}
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			b.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		client := apns2.NewTokenClient(&token.Token{AuthKey: key, KeyID: a.KeyID, TeamID: a.TeamID})
		client.Host = a.URL()
		client.HTTPClient = &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		payload, err := notification.APNs(c)
		if err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, err := client.PushWithContext(context.Background(), &apns2.Notification{DeviceToken: dev.Token,
					Topic: a.Topic, Payload: payload, CollapseID: c.GetCollapseId(), Priority: apns2.PriorityHigh})
				if err != nil || r.StatusCode != http.StatusOK {
					b.Errorf("push: %+v %v", r, err)
					return
				}
			}
		})
	})
}

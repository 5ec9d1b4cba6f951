package queue

import (
	"context"
	"crypto/tls"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/tlsx"
)

const kafkaPassword = "kafka-s3cret"

// TestSASLAndTLS runs the producer, the consumer and topic creation against
// a broker that requires SASL over TLS, with every mechanism gomsg offers,
// and checks that missing or wrong credentials, or plaintext, are refused.
func TestSASLAndTLS(t *testing.T) {
	t.Parallel()
	for _, mech := range []struct{ flag, kfake string }{
		{SASLPlain, "PLAIN"}, {SASLScramSHA256, "SCRAM-SHA-256"}, {SASLScramSHA512, "SCRAM-SHA-512"},
	} {
		t.Run(mech.flag, func(t *testing.T) {
			t.Parallel()
			ca := testutil.NewCA(t)
			addr := testutil.StartKafkaSecure(t, testutil.KafkaSecure{Mechanism: mech.kfake, User: "gomsg", Password: kafkaPassword,
				TLS: ca.ServerTLS(t, "kafka")}, 2)
			brokers := []string{addr}
			clientTLS := tlsx.ClientConfig(ca.Pool, nil, "")
			good := Security{TLS: clientTLS}
			var err error
			if good.SASL, err = NewSASL(mech.flag, "gomsg", kafkaPassword); err != nil {
				t.Fatal(err)
			}
			topic := "secure." + mech.flag
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := EnsureTopicsWith(ctx, good, brokers, []TopicSpec{{Name: topic, Partitions: 2}}); err != nil {
				t.Fatalf("create topic with credentials: %v", err)
			}
			p := NewProducer(ProducerConfig{Brokers: brokers, Security: good}, zaptest.NewLogger(t))
			t.Cleanup(func() { _ = p.Close() })
			const n = 10
			for i := range n {
				if err := p.Publish(ctx, Record{Topic: topic, Key: "k" + strconv.Itoa(i%3), Value: []byte(strconv.Itoa(i))}); err != nil {
					t.Fatalf("publish with credentials: %v", err)
				}
			}
			rec := newSeqRecorder()
			startConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: topic, Security: good},
				func(_ context.Context, m Message) error {
					v, _ := strconv.Atoi(string(m.Value))
					rec.add(m.Key, v)
					return nil
				})
			rec.waitCount(t, n, 20*time.Second)

			wrong, err := NewSASL(mech.flag, "gomsg", "wrong-password")
			if err != nil {
				t.Fatal(err)
			}
			// The refusals run in parallel: each waits out its timeouts.
			t.Run("refused", func(t *testing.T) {
				for _, bad := range []struct {
					name string
					sec  Security
				}{
					{"no credentials", Security{TLS: clientTLS}},
					{"wrong password", Security{SASL: wrong, TLS: clientTLS}},
					{"plaintext", Security{SASL: good.SASL}},
					{"unknown CA", Security{SASL: good.SASL, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}},
				} {
					t.Run(bad.name, func(t *testing.T) {
						t.Parallel()
						bp := NewProducer(ProducerConfig{Brokers: brokers, Security: bad.sec, WriteTimeout: 2 * time.Second}, zaptest.NewLogger(t))
						err := bp.Publish(context.Background(), Record{Topic: topic, Key: "x", Value: []byte("refused")})
						_ = bp.Close()
						if err == nil {
							t.Errorf("%s: publish succeeded", bad.name)
						} else if strings.Contains(err.Error(), kafkaPassword) {
							t.Errorf("%s: error shows the password: %v", bad.name, err)
						}
						// A refused connection is retried as an unreachable
						// broker would be, until the context ends; the
						// brokers' topic list below shows nothing was created.
						tctx, tcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
						err = EnsureTopicsWith(tctx, bad.sec, brokers, []TopicSpec{{Name: "other." + mech.flag, Partitions: 1}})
						tcancel()
						if err == nil {
							t.Errorf("%s: topic created", bad.name)
						}
					})
				}
			})
			if topics := listTopics(t, good, brokers); slices.Contains(topics, "other."+mech.flag) || !slices.Contains(topics, topic) {
				t.Errorf("topics %v: want %s and no topic made with refused credentials", topics, topic)
			}
			if got := rec.count(); got != n {
				t.Errorf("consumed %d records, want %d (a refused publish was written)", got, n)
			}
		})
	}
}

// listTopics lists the brokers' topics with sec.
func listTopics(t *testing.T, sec Security, brokers []string) []string {
	t.Helper()
	tr := sec.transport(0)
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{})
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	var names []string
	for _, tp := range md.Topics {
		names = append(names, tp.Name)
	}
	return names
}

func TestNewSASLErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ mech, user, pass, want string }{
		{"", "u", "", "--kafka-sasl-mechanism: must be set"},
		{"oauthbearer", "u", "p", "--kafka-sasl-mechanism: \"oauthbearer\""},
		{"plain", "", "p", "--kafka-username and --kafka-password"},
		{"SCRAM-SHA-256", "u", "", "--kafka-username and --kafka-password"},
	} {
		_, err := NewSASL(tc.mech, tc.user, tc.pass)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q/%q: error %v, want one containing %q", tc.mech, tc.user, err, tc.want)
		}
	}
	if m, err := NewSASL("", "", ""); m != nil || err != nil {
		t.Fatalf("no SASL: %v, %v", m, err)
	}
}

func TestNewSASLMechanisms(t *testing.T) {
	t.Parallel()
	for mech, want := range map[string]string{"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256", "SCRAM-SHA-512": "SCRAM-SHA-512"} {
		m, err := NewSASL(mech, "user", "pass")
		if err != nil || m == nil || m.Name() != want {
			t.Errorf("NewSASL(%q) = %v, %v, want mechanism %s", mech, m, err, want)
		}
	}
	// SCRAM refuses a password SASLprep prohibits; the error does not show it.
	const bad = "pass\u0007word"
	for _, mech := range []string{SASLScramSHA256, SASLScramSHA512} {
		_, err := NewSASL(mech, "user", bad)
		if err == nil || strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--kafka-sasl-mechanism "+mech) {
			t.Errorf("NewSASL(%s) with a prohibited password: error %v, want one naming the flag and not the password", mech, err)
		}
	}
}

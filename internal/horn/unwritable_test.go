package horn_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/horn/horntest"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// createSmallTopic creates topic on broker with one partition that refuses
// records larger than 1 KiB.
func createSmallTopic(t *testing.T, broker, topic string) {
	t.Helper()
	conn, err := kafka.Dial("tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "1024"}}})
	if err != nil {
		t.Fatal(err)
	}
}

// bigContent is a notification whose record is larger than a small topic
// takes, and that providers still accept.
func bigContent(title string) *pushpb.Notification {
	return &pushpb.Notification{Title: title, Body: "hi", Data: map[string]string{"blob": strings.Repeat("x", 1500)}}
}

// titles returns the alert titles of the APNs requests for token.
func titles(reqs []horntest.Request) []string {
	var out []string
	for _, r := range reqs {
		aps, _ := r.Body["aps"].(map[string]any)
		alert, _ := aps["alert"].(map[string]any)
		title, _ := alert["title"].(string)
		out = append(out, title)
	}
	return out
}

// A notification whose retry the retry topic refuses for good (larger than
// it accepts) goes to the dead-letter topic, counted, instead of being
// tried again in place for ever; the user's next notification gets through.
// When the dead-letter topic refuses it too it is dropped, counted.
func TestUnwritableRetryIsDeadLetteredOrDropped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		smallDead          bool
		wantDead, wantDrop int
	}{
		{"dead-lettered", false, 1, 0},
		{"dropped", true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const smallRetry, smallDead = "t.small-retry", "t.small-dead"
			e := startWith(t, func(c *horn.Config) {
				c.RetryTopic = smallRetry
				createSmallTopic(t, c.Brokers[0], smallRetry)
				if tc.smallDead {
					c.DeadTopic = smallDead
					createSmallTopic(t, c.Brokers[0], smallDead)
				}
			})
			e.apns.Respond("tok", horntest.Answer{Status: 503, Reason: "ServiceUnavailable"}, horntest.Answer{Status: 200})
			e.register("ivy", "ios", "apns", "tok")
			e.notify("ivy", "ios", "apns", bigContent("first"))
			e.notify("ivy", "ios", "apns", bigContent("second"))
			reqs := e.waitRequests(e.apns, "tok", 2)
			if got := titles(reqs); len(got) != 2 || got[0] != "first" || got[1] != "second" {
				t.Fatalf("requests with titles %v, want [first second]: the refused retry held the partition", got)
			}
			tu.WaitFor(t, 10*time.Second, func() error {
				dead := testutil.ToFloat64(e.metrics.UnwritableRecords.WithLabelValues("horn", "dead_lettered"))
				drop := testutil.ToFloat64(e.metrics.UnwritableRecords.WithLabelValues("horn", "dropped"))
				if int(dead) != tc.wantDead || int(drop) != tc.wantDrop {
					return fmt.Errorf("unwritable dead_lettered %v dropped %v, want %d and %d", dead, drop, tc.wantDead, tc.wantDrop)
				}
				return nil
			})
			if recs := horntest.ReadTopic(t, e.kafka, smallRetry); len(recs) != 0 {
				t.Fatalf("%d retry records written", len(recs))
			}
			dead := horntest.ReadTopic(t, e.kafka, deadTopic)
			if len(dead) != tc.wantDead {
				t.Fatalf("%d dead letters, want %d", len(dead), tc.wantDead)
			}
			if tc.wantDead == 1 {
				if n := dead[0].GetNotification(); n.GetToken() != "tok" || n.GetUid() != "ivy" || n.GetContent().GetTitle() != "first" {
					t.Fatalf("dead letter %v, want ivy/tok's first notification", n)
				}
			}
			if n := e.apns.Count("tok"); n != 2 {
				t.Fatalf("%d requests, want 2", n)
			}
		})
	}
}

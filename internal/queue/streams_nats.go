package queue

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/backoff"
)

// partitionsMeta is the stream metadata key that holds a topic's partition
// count: producers read it to map a key to its subject, and it must not
// change while records are in the stream (a key would move to another
// partition and lose its order).
const partitionsMeta = "gomsg.partitions"

// The partition count is also written into the stream's description as
// "gomsg.partitions=<n>": nats-server before 2.10 (Debian 12's 2.9, say)
// drops stream metadata, and the description is the one free-text field
// every JetStream server keeps.
var partitionsInDescription = regexp.MustCompile(`(?:^|\s)` + regexp.QuoteMeta(partitionsMeta) + `=(\d+)(?:\s|$)`)

// streamPartitions is the partition count cfg records: its metadata, or on
// a server that drops metadata its description; "" when neither holds it.
func streamPartitions(cfg jetstream.StreamConfig) string {
	if n := cfg.Metadata[partitionsMeta]; n != "" {
		return n
	}
	if m := partitionsInDescription.FindStringSubmatch(cfg.Description); m != nil {
		return m[1]
	}
	return ""
}

// ErrStreamConflict is returned by EnsureStreams for a stream that exists
// with settings gomsg cannot work with.
var ErrStreamConflict = errors.New("queue: stream settings conflict")

// EnsureStreams makes sure every topic has its stream: subjects
// <topic>.<partition>, limits retention (records stay until MaxAge, as on
// Kafka; a consumer's position is its own), file storage, the partition
// count in its metadata. With create it creates the streams that are
// missing (--create-topics), with NATSConfig.Replicas and MaxAge; without,
// a missing stream is an error. An existing stream whose subjects,
// retention or partition count differ is refused with ErrStreamConflict,
// naming the setting; its replicas and max age are left as they are. While
// the servers cannot be reached it retries until ctx ends.
func (j *JetStream) EnsureStreams(ctx context.Context, topics []TopicSpec, create bool) error {
	for _, t := range topics {
		if t.Name == "" || t.Partitions <= 0 {
			return fmt.Errorf("ensure streams: invalid spec %+v: want a name and at least one partition", t)
		}
		err := backoff.Retry(ctx, backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}, func() error {
			err := j.ensureStream(ctx, t, create)
			if err != nil && (errors.Is(err, ErrStreamConflict) || errors.Is(err, jetstream.ErrStreamNotFound) ||
				errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)) {
				return backoff.Permanent(err)
			}
			return err
		}, nil)
		if err != nil {
			return err
		}
	}
	return nil
}

func (j *JetStream) ensureStream(ctx context.Context, t TopicSpec, create bool) error {
	name := StreamName(t.Name)
	s, err := j.js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) && create:
		replicas := j.cfg.Replicas
		if t.ReplicationFactor > 0 {
			replicas = t.ReplicationFactor
		}
		_, err = j.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{t.Name + ".*"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: replicas, MaxAge: j.cfg.MaxAge, Discard: jetstream.DiscardOld,
			Metadata:    map[string]string{partitionsMeta: strconv.Itoa(t.Partitions)},
			Description: fmt.Sprintf("gomsg topic %s %s=%d", t.Name, partitionsMeta, t.Partitions),
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return errors.New("stream created concurrently; checking it again")
		}
		if err != nil {
			return fmt.Errorf("create stream %s: %w", name, err)
		}
		j.log.Info("stream created", zap.String("stream", name), zap.Int("partitions", t.Partitions), zap.Int("replicas", replicas))
		return nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("stream %s (topic %s) does not exist; create it or start with --create-topics: %w", name, t.Name, err)
	case err != nil:
		return fmt.Errorf("stream %s: %w", name, err)
	}
	return checkStream(s.CachedInfo().Config, t)
}

// checkStream refuses a stream gomsg cannot work with.
func checkStream(cfg jetstream.StreamConfig, t TopicSpec) error {
	conflict := func(what string, args ...any) error {
		return fmt.Errorf("%w: stream %s (topic %s): %s", ErrStreamConflict, cfg.Name, t.Name, fmt.Sprintf(what, args...))
	}
	want := t.Name + ".*"
	switch {
	case !slices.Contains(cfg.Subjects, want):
		return conflict("subjects %s, want %s among them", strings.Join(cfg.Subjects, ","), want)
	case cfg.Retention != jetstream.LimitsPolicy:
		// Work-queue and interest retention delete a record once a
		// consumer acknowledged it, or while no consumer is bound; gomsg's
		// consumers keep their own positions and read records again after
		// a hand-over.
		return conflict("retention %s, want limits", cfg.Retention)
	case streamPartitions(cfg) != strconv.Itoa(t.Partitions):
		return conflict("%d partitions wanted, the stream has %q in its metadata or description %s (changing the count would move keys to other partitions and break their order)",
			t.Partitions, streamPartitions(cfg), partitionsMeta)
	}
	return nil
}

// partitionsOf returns the partitions of topic, read once from its stream.
func (j *JetStream) partitionsOf(ctx context.Context, topic string) ([]int, error) {
	j.mu.Lock()
	ps, ok := j.parts[topic]
	j.mu.Unlock()
	if ok {
		return ps, nil
	}
	s, err := j.js.Stream(ctx, StreamName(topic))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", StreamName(topic), err)
	}
	n, err := strconv.Atoi(streamPartitions(s.CachedInfo().Config))
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("%w: stream %s has no partition count in its metadata or description %s", ErrStreamConflict, StreamName(topic), partitionsMeta)
	}
	ps = make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	j.mu.Lock()
	j.parts[topic] = ps
	j.mu.Unlock()
	return ps, nil
}

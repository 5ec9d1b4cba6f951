package queue

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/outage"
)

// NATSConfig is how gomsg reaches NATS JetStream (--queue nats).
type NATSConfig struct {
	// URLs are the servers, nats://host:port each (--nats-url).
	URLs []string
	// User and Password, or Token, or NKeySeedFile (an NKey seed), or
	// CredsFile (a JWT and NKey .creds file) authenticate gomsg; TLS, when
	// set, encrypts the connections (and verifies the servers against its
	// roots). Passwords and tokens are read from files or the environment by
	// the caller, never taken from a command line.
	User, Password string
	Token          string
	NKeySeedFile   string
	CredsFile      string
	TLS            *tls.Config
	// Replicas and MaxAge are the settings of the streams and buckets gomsg
	// creates (--nats-replicas, --nats-max-age). Defaults 1 and 7 days.
	Replicas int
	MaxAge   time.Duration
	// WriteTimeout bounds one Publish call. Default 10s.
	WriteTimeout time.Duration
}

func (c NATSConfig) withDefaults() NATSConfig {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 7 * 24 * time.Hour
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	return c
}

// Validate names the first bad setting. It never prints a credential.
func (c NATSConfig) Validate() error {
	n := 0
	for _, set := range []bool{c.User != "" || c.Password != "", c.Token != "", c.NKeySeedFile != "", c.CredsFile != ""} {
		if set {
			n++
		}
	}
	switch {
	case len(c.URLs) == 0:
		return errors.New("--nats-url: must be set")
	case n > 1:
		return errors.New("NATS credentials: set one of user/password, token, NKey seed file or creds file")
	case (c.User == "") != (c.Password == ""):
		return errors.New("--nats-user and its password: both needed")
	case c.Replicas > 5:
		return fmt.Errorf("--nats-replicas: %d, JetStream allows at most 5", c.Replicas)
	}
	return nil
}

// JetStream is a connection to NATS JetStream: the Producer, stream set-up
// and consumers of gomsg's second queue. Safe for concurrent use.
type JetStream struct {
	cfg    NATSConfig
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *zap.Logger
	outage *outage.Tracker

	mu    sync.Mutex
	parts map[string][]int // topic → its partitions, from the stream's metadata
}

// ConnectNATS connects to cfg.URLs. While no server answers it keeps trying
// in the background: the connection is returned at once, and Publish fails
// with ErrUnavailable until a server is reached (Ping tells).
func ConnectNATS(cfg NATSConfig, log *zap.Logger) (*JetStream, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.Named("queue")
	tr := outage.New(log, "nats")
	opts := []nats.Option{
		nats.Name("gomsg"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.Timeout(5 * time.Second),
		nats.PingInterval(2 * time.Second),
		nats.MaxPingsOutstanding(2),
		// While disconnected, a publish fails at once (ErrUnavailable)
		// instead of waiting in a buffer the caller cannot see.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				err = errors.New("disconnected")
			}
			tr.Fail(err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) { tr.OK() }),
		nats.ConnectHandler(func(*nats.Conn) { tr.OK() }),
	}
	switch {
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey-seed-file: %w", err)
		}
		opts = append(opts, o)
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS.Clone()))
	}
	nc, err := nats.Connect(strings.Join(cfg.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", strings.Join(cfg.URLs, ","), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats jetstream: %w", err)
	}
	return &JetStream{cfg: cfg, nc: nc, js: js, log: log, outage: tr, parts: make(map[string][]int)}, nil
}

// Close closes the connection.
func (j *JetStream) Close() error {
	j.nc.Close()
	return nil
}

// Ping fails unless a server answers with the account's JetStream
// information.
func (j *JetStream) Ping(ctx context.Context) error {
	if !j.nc.IsConnected() {
		return fmt.Errorf("nats: not connected (%s)", j.nc.Status())
	}
	if _, err := j.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats jetstream: %w", err)
	}
	return nil
}

// invalidName matches what a stream or bucket name may not hold.
var invalidName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// StreamName is the JetStream stream of topic: the topic with every
// character a stream name may not hold ('.' among them) replaced by '_'.
// The stream takes the subjects <topic>.<partition>.
func StreamName(topic string) string { return invalidName.ReplaceAllString(topic, "_") }

// subject is the subject of topic's partition p.
func subject(topic string, p int) string { return fmt.Sprintf("%s.%d", topic, p) }

package queue

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is how gomsg authenticates to the brokers and encrypts the
// connections: applied to every transport, dialer, reader and writer the
// queue package builds. The zero value is plaintext without SASL.
type Security struct {
	SASL sasl.Mechanism
	TLS  *tls.Config
}

// SASL mechanism names accepted by NewSASL.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// NewSASL builds a SASL mechanism; an empty mechanism means no SASL. Errors
// name the flag and never carry the password.
func NewSASL(mechanism, username, password string) (sasl.Mechanism, error) {
	m := strings.ToLower(mechanism)
	if m == "" {
		if username != "" || password != "" {
			return nil, fmt.Errorf("--kafka-sasl-mechanism: must be set (plain, scram-sha-256 or scram-sha-512) to use --kafka-username or --kafka-password")
		}
		return nil, nil
	}
	if username == "" || password == "" {
		return nil, fmt.Errorf("--kafka-username and --kafka-password: both needed for --kafka-sasl-mechanism %s", m)
	}
	switch m {
	case SASLPlain:
		return plain.Mechanism{Username: username, Password: password}, nil
	case SASLScramSHA256, SASLScramSHA512:
		algo := scram.SHA256
		if m == SASLScramSHA512 {
			algo = scram.SHA512
		}
		s, err := scram.Mechanism(algo, username, password)
		if err != nil {
			return nil, fmt.Errorf("--kafka-sasl-mechanism %s: cannot use these credentials", m)
		}
		return s, nil
	}
	return nil, fmt.Errorf("--kafka-sasl-mechanism: %q, want plain, scram-sha-256 or scram-sha-512", mechanism)
}

// transport is a kafka-go transport with the security applied.
func (s Security) transport(dialTimeout time.Duration) *kafka.Transport {
	return &kafka.Transport{DialTimeout: dialTimeout, ClientID: "gomsg", SASL: s.SASL, TLS: s.TLS}
}

// dialer is a kafka-go dialer (for readers) with the security applied.
func (s Security) dialer() *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, ClientID: "gomsg", SASLMechanism: s.SASL, TLS: s.TLS}
}

//go:build nodev

package embedded

// Included reports whether this build has the embedded backends.
const Included = false

// Etcd is an embedded etcd server; this build has none.
type Etcd struct{ Addr string }

// StartEtcd returns ErrLeftOut: this build has no embedded etcd.
func StartEtcd(dir, clientAddr, peerAddr string) (*Etcd, error) { return nil, ErrLeftOut }

// Close does nothing.
func (e *Etcd) Close() {}

// Kafka is an in-process Kafka-protocol broker; this build has none.
type Kafka struct{ Addr string }

// StartKafka returns ErrLeftOut: this build has no in-process Kafka.
func StartKafka(addr string, partitions int, topics ...string) (*Kafka, error) {
	return nil, ErrLeftOut
}

// Close does nothing.
func (k *Kafka) Close() {}

// Redis is an in-process Redis; this build has none.
type Redis struct{ Addr string }

// StartRedis returns ErrLeftOut: this build has no in-process Redis.
func StartRedis(addr string) (*Redis, error) { return nil, ErrLeftOut }

// Close does nothing.
func (r *Redis) Close() {}

// NATS is an in-process nats-server; this build has none.
type NATS struct{ URL string }

// StartNATS returns ErrLeftOut: this build has no in-process nats-server.
func StartNATS(addr, dir string) (*NATS, error) { return nil, ErrLeftOut }

// Close does nothing.
func (n *NATS) Close() {}

// Package embedded runs gomsg's backends inside the process: etcd
// (go.etcd.io/etcd/server/v3/embed), a Kafka-protocol broker (kfake), a
// nats-server with JetStream and Redis
// (miniredis with TTLs that follow the wall clock). `gomsg dev` and the tests
// use it; production points the services at real servers instead.
//
// Built with -tags nodev (as the release image is), the package leaves those
// servers out — about a third of gomsg's binary — and every Start function
// returns ErrLeftOut.
package embedded

import "errors"

// ErrLeftOut is what the Start functions return in a build with -tags nodev.
var ErrLeftOut = errors.New("this gomsg was built with -tags nodev, which leaves the embedded backends out; " +
	"build without the tag (go build ./cmd/gomsg) or pass --redis-addr/--kafka-brokers/--etcd-endpoints")

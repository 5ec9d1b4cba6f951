// Package sdktest tests the Go device SDK (module github.com/gomsg/gomsg/client)
// against the services run in process on a real redis-server, an embedded
// etcd and the in-process Kafka-protocol broker. The tests live in the
// server's module so that the SDK's own module needs none of them.
package sdktest

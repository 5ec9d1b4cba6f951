// Package clusterchaos checks gomsg's Redis stores (offline messages and
// sessions) on a real Redis Cluster that changes under their load: slots
// resharded from one master to another while users on them write, read and
// ACK, and a master killed while its users write. Each test states what
// must hold afterwards — nothing acknowledged is lost by a reshard; after a
// failover only writes acknowledged past the last replication fence may be,
// and every failed write was retried until it held. The package has tests
// only.
package clusterchaos

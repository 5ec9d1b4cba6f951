//go:build !nodev

package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS is an in-process nats-server with JetStream.
type NATS struct {
	// URL is the client URL, nats://host:port.
	URL string
	s   *server.Server
}

// StartNATS runs a nats-server with JetStream on addr (host:port, port 0
// picks a free one), its file store in dir.
func StartNATS(addr, dir string) (*NATS, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("nats address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("nats address %q: %w", addr, err)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{Host: host, Port: p, JetStream: true, StoreDir: dir,
		NoSigs: true, NoLog: true, ServerName: "gomsg-dev"})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("nats server: not ready after 10s")
	}
	return &NATS{URL: s.ClientURL(), s: s}, nil
}

// Close stops the server and waits until it has.
func (n *NATS) Close() {
	n.s.Shutdown()
	n.s.WaitForShutdown()
}

package bench

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// signalBoat sends sig to boat i's process.
func (c *Cluster) signalBoat(i int, sig syscall.Signal) error {
	if i >= len(c.Boats) {
		return fmt.Errorf("boat %d: the cluster has %d spawned boats", i, len(c.Boats))
	}
	ch := c.children[c.Boats[i].child]
	if err := ch.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %s: %w", ch.name, sig, err)
	}
	return nil
}

// boatPid is boat i's process id.
func (c *Cluster) boatPid(i int) int {
	return c.children[c.Boats[i].child].cmd.Process.Pid
}

// waitBoat waits up to timeout for boat i's process to exit.
func (c *Cluster) waitBoat(i int, timeout time.Duration) error {
	ch := c.children[c.Boats[i].child]
	select {
	case err := <-ch.done:
		ch.done <- err // stop and exited read it again
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s", ch.name, timeout)
	}
}

// restartBoat starts boat i again, after its process exited, with the same
// flags (id and addresses), waits until its ops server is up (/readyz:
// its backends are reachable) and returns when that was; then waits until
// its client stream reports SERVING (gRPC health): registered in etcd,
// after the previous run's registration expired, and its previous sessions
// cleared.
func (c *Cluster) restartBoat(ctx context.Context, i int) (up time.Time, err error) {
	b := &c.Boats[i]
	b.restarts++
	ch, err := startChild(b.Name+"-restart-"+strconv.Itoa(b.restarts), c.logDir, b.bin, b.args...)
	if err != nil {
		return time.Time{}, err
	}
	c.children[b.child] = ch
	for j := range c.Services {
		if c.Services[j].Name == b.Name {
			c.Services[j].Pid = ch.cmd.Process.Pid
		}
	}
	if err := waitReady(ctx, ch, b.OpsAddr); err != nil {
		return time.Time{}, err
	}
	up = time.Now()
	return up, c.waitServing(ctx, ch, b.ClientAddr)
}

// waitServing polls the gRPC health of a boat's client stream until it
// answers SERVING, for up to two minutes.
func (c *Cluster) waitServing(ctx context.Context, ch *child, addr string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(transport(c.ClientTLS)))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := ch.exited(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not serving on %s within 2 minutes (see its log)", ch.name, addr)
		}
		if !sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"
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
// flags (id and addresses) and waits until it is ready: registered in etcd
// (after the previous run's registration expired) and its previous
// sessions cleared.
func (c *Cluster) restartBoat(ctx context.Context, i int) error {
	b := &c.Boats[i]
	b.restarts++
	ch, err := startChild(b.Name+"-restart-"+strconv.Itoa(b.restarts), c.logDir, c.gomsg, b.args...)
	if err != nil {
		return err
	}
	c.children[b.child] = ch
	return waitReady(ctx, ch, b.OpsAddr)
}

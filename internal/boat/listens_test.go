package boat

import (
	"fmt"
	"net"
	"testing"
)

// listensOn is what lets a restarted boat revoke its crashed run's lease:
// it must say yes only when this process's listener holds the address, so
// that no other live process can.
func TestListensOn(t *testing.T) {
	listen := func(addr string) net.Listener {
		t.Helper()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		return ln
	}
	lo := listen("127.0.0.1:0")
	port := lo.Addr().(*net.TCPAddr).Port
	all := listen(":0")
	allPort := all.Addr().(*net.TCPAddr).Port
	cases := []struct {
		ln   net.Listener
		addr string
		want bool
	}{
		{lo, fmt.Sprintf("127.0.0.1:%d", port), true},
		{lo, fmt.Sprintf("127.0.0.1:%d", port+1), false},       // another port
		{lo, fmt.Sprintf("127.0.0.2:%d", port), false},         // bound to one IP, asked another
		{all, fmt.Sprintf("127.0.0.1:%d", allPort), true},      // every address of a host that has it
		{all, fmt.Sprintf("198.51.100.77:%d", allPort), false}, // an IP this host does not have (TEST-NET-2)
		{all, fmt.Sprintf("boat-0.boats:%d", allPort), false},  // a name proves nothing
		{all, fmt.Sprintf("127.0.0.1:%d", allPort+1), false},   // another port
		{lo, "not an address", false},
	}
	// Bound to one IP, asked another IP this host has: another process may
	// listen there.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.Equal(net.IPv4(127, 0, 0, 1)) {
			other = net.JoinHostPort(ipn.IP.String(), fmt.Sprint(port))
			break
		}
	}
	if other == "" {
		t.Fatal("this host has no address but 127.0.0.1 to ask about")
	}
	cases = append(cases, struct {
		ln   net.Listener
		addr string
		want bool
	}{lo, other, false})
	for _, c := range cases {
		if got := listensOn(c.ln, c.addr); got != c.want {
			t.Errorf("listensOn(%s, %s) = %v, want %v", c.ln.Addr(), c.addr, got, c.want)
		}
	}
}

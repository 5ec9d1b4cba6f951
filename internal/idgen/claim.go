package idgen

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoFreeNode means every node id is leased by a live process.
var ErrNoFreeNode = errors.New("idgen: no free node id in etcd")

// Claim leases the lowest free node id under prefix+"/nodes/" with lease, so
// that two live processes never generate the same ids. The id is released when
// the lease ends. owner is stored as the key's value for operators.
func Claim(ctx context.Context, cli *clientv3.Client, prefix string, lease clientv3.LeaseID, owner string) (int, error) {
	for node := 0; node <= MaxNode; node++ {
		key := prefix + "/nodes/" + strconv.Itoa(node)
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, owner, clientv3.WithLease(lease))).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("idgen: claim node id: %w", err)
		}
		if resp.Succeeded {
			return node, nil
		}
	}
	return 0, ErrNoFreeNode
}

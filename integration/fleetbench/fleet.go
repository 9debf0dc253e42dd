package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/publish"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// A simulated node is a DGX H200 as the agent publishes it: pfsPerNode
// single-port ConnectX-7 HCAs (one NIC each, so one system image GUID
// each), vfsPerNode/pfsPerNode VFs on each, every VF's GUIDs derived from
// its PF's burned-in GUID by the shipped hostconfig's scheme
// (hostconfig.DeriveVFGUIDs), the first VF of each PF held by a pod.
const pfsPerNode = 8

// podNamespace holds the simulated pods (an Event names a pod's namespace,
// which must exist).
const podNamespace = "fleet"

type simNode struct {
	name string
	uid  string
	vfs  []v1alpha1.VF
	pub  *publish.Publisher
}

// fleet is the simulated nodes, published through publish.Publisher over
// fabricclient: the agent's own client code.
type fleet struct {
	client     fabricclient.Client
	kube       kubernetes.Interface
	vfsPerNode int
	nodes      []*simNode
	since      time.Time
	// used are the nodes injected into at this fleet size: each pair is
	// new while there are nodes left (a node's Events are rate limited:
	// client-go's spam filter, a burst of 10 per object and type).
	used map[int]bool
}

func (f *fleet) names() []string {
	out := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.name
	}
	return out
}

// burnedIn is a PF's factory port GUID: the Mellanox OUI b8:3f:d2, 03:00,
// and a serial unique across the fleet (real ones are; random ones would
// collide: 8,000 draws of 24 bits meet twice on average).
func burnedIn(node, pf int) sysfs.GUID {
	serial := uint64(node*pfsPerNode + pf + 1)
	return sysfs.GUID(0xb83fd2<<40 | 0x0300<<24 | serial)
}

func pciOf(pf, vf int) string {
	return fmt.Sprintf("0000:%02x:%02x.%d", 0x18+pf*0x10, vf/8, 2+vf%8)
}

// identities are node n's VFs as its agent would publish them.
func (f *fleet) identities(n int, name string, since time.Time) ([]v1alpha1.VF, error) {
	perPF := f.vfsPerNode / pfsPerNode
	vfs := make([]v1alpha1.VF, 0, f.vfsPerNode)
	for p := range pfsPerNode {
		pf := burnedIn(n, p)
		for v := range perPF {
			g, err := hostconfig.DeriveVFGUIDs(pf, v)
			if err != nil {
				return nil, err
			}
			vf := v1alpha1.VF{PCI: pciOf(p, v), PF: fmt.Sprintf("0000:%02x:00.0", 0x18+p*0x10),
				RDMADevice: fmt.Sprintf("mlx5_%d", pfsPerNode+p*perPF+v), NodeGUID: g.Node.String(),
				PortGUIDs: []string{g.Port.String()}, SysImageGUID: pf.String(), LinkLayer: "InfiniBand",
				PortState: "ACTIVE", Since: metav1.NewTime(since)}
			if v == 0 {
				vf.Pod = &v1alpha1.PodRef{Namespace: podNamespace, Name: fmt.Sprintf("%s-train-%d", name, p), UID: fmt.Sprintf("%08x-0000-4000-8000-%012x", n, p)}
			}
			vfs = append(vfs, vf)
		}
	}
	return vfs, nil
}

// grow creates nodes up to n (their Node objects, then their NodeVFSets
// through each node's publisher), workers at a time.
func (f *fleet) grow(ctx context.Context, n, workers int) error {
	first := len(f.nodes)
	for i := first; i < n; i++ {
		f.nodes = append(f.nodes, &simNode{name: fmt.Sprintf("dgx-%04d", i)})
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f.publishNew(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := first; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d nodes not published, first: %w", len(errs), errs[0])
	}
	return nil
}

func (f *fleet) publishNew(ctx context.Context, i int) error {
	sn := f.nodes[i]
	node, err := f.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: sn.name}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", sn.name, err)
	}
	sn.uid = string(node.UID)
	if sn.vfs, err = f.identities(i, sn.name, f.since); err != nil {
		return err
	}
	sn.pub = publish.New(f.client, sn.name, node.UID)
	if _, err := sn.pub.Publish(ctx, sn.vfs); err != nil {
		return err
	}
	return nil
}

// injection is one duplicate: node b's VF j takes node a's VF i's node
// GUID, as a node that ran a copied GUID list would.
type injection struct {
	a, b *simNode
	i, j int
}

// pick draws a pair of nodes not used yet (any pair once all are), and a
// VF of each.
func (f *fleet) pick(rng *rand.Rand) injection {
	fresh := len(f.nodes)-len(f.used) >= 2
	draw := func(not int) int {
		for {
			k := rng.IntN(len(f.nodes))
			if k != not && (!fresh || !f.used[k]) {
				return k
			}
		}
	}
	a := draw(-1)
	b := draw(a)
	f.used[a], f.used[b] = true, true
	return injection{a: f.nodes[a], b: f.nodes[b], i: rng.IntN(f.vfsPerNode), j: rng.IntN(f.vfsPerNode)}
}

// inject publishes b with the duplicate (a new GUID on that VF: Since is
// now, as Identities would set it).
func (f *fleet) inject(ctx context.Context, in injection) error {
	vfs := cloneVFs(in.b.vfs)
	vfs[in.j].NodeGUID = in.a.vfs[in.i].NodeGUID
	vfs[in.j].Since = metav1.NewTime(time.Now())
	_, err := in.b.pub.Publish(ctx, vfs)
	return err
}

// restore publishes b's own GUIDs again (Since now: the GUID changed).
func (f *fleet) restore(ctx context.Context, in injection) error {
	in.b.vfs[in.j].Since = metav1.NewTime(time.Now())
	_, err := in.b.pub.Publish(ctx, cloneVFs(in.b.vfs))
	return err
}

func cloneVFs(vfs []v1alpha1.VF) []v1alpha1.VF {
	out := make([]v1alpha1.VF, len(vfs))
	copy(out, vfs)
	return out
}

// copyGUIDs publishes to with from's node and port GUIDs on every VF, as a
// node set up from another node's GUID list would (the system image GUIDs
// are the cards' own: no GUID list sets them).
func (f *fleet) copyGUIDs(ctx context.Context, from, to *simNode) error {
	vfs := cloneVFs(to.vfs)
	now := metav1.NewTime(time.Now())
	for k := range vfs {
		vfs[k].NodeGUID, vfs[k].PortGUIDs, vfs[k].Since = from.vfs[k].NodeGUID, from.vfs[k].PortGUIDs, now
	}
	_, err := to.pub.Publish(ctx, vfs)
	return err
}

// restoreAll publishes n's own GUIDs again, every VF's Since now.
func (f *fleet) restoreAll(ctx context.Context, n *simNode) error {
	now := metav1.NewTime(time.Now())
	for k := range n.vfs {
		n.vfs[k].Since = now
	}
	_, err := n.pub.Publish(ctx, cloneVFs(n.vfs))
	return err
}

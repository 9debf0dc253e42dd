//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/controller"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/publish"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/kubereport"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const (
	fabricUser = "system:serviceaccount:" + daemonSetNamespace + ":sriov-stable-fabric"
	// nodeNameExtra is where the API server puts the node a pod-bound
	// service account token was issued on.
	nodeNameExtra = "authentication.kubernetes.io/node-name"
	simNode       = "fabric-sim-node"
)

// TestSEFabricLedger (scenario 14): deploy/fabric's CRD and the RBAC and
// admission policy of deploy/fabric and deploy/fabric-publish on the real
// API server. The node agent's account (impersonated with its token's
// node-name claim) publishes its node's NodeVFSet through the agent's
// publisher, and is refused another node's object (the admission policy),
// the status (RBAC) and any write without the claim. The controller's
// account, running the real controller, finds a node GUID shared with a
// simulated node's object, writes it into both statuses (server-side
// apply of status: the agent's spec and the controller's status keep
// their own field managers) and tells the node by an Event; it is refused
// the spec. A fixed GUID clears both.
func TestSEFabricLedger(t *testing.T) {
	c := mustCluster(t)
	c.ensureDaemonSet(t) // its namespace and service account
	ctx := context.Background()

	objs, err := fabricObjects()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{kubecluster.NodeName, simNode} {
			_ = c.deleteNodeVFSet(ctx, name)
		}
		if err := c.deleteFabric(ctx, objs); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	admin := c.applyFabric(t, objs)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, kubecluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	agent := c.fabricClient(t, agentUser, map[string][]string{nodeNameExtra: {kubecluster.NodeName}})
	noClaim := c.fabricClient(t, agentUser, nil)
	ctlClient := c.fabricClient(t, fabricUser, nil)
	const shared = "a288:c2ff:fe5e:0001"
	vf := func(pci, guid string, since time.Time) v1alpha1.VF {
		return v1alpha1.VF{PCI: pci, PF: "0000:18:00.0", NodeGUID: guid, LinkLayer: "InfiniBand", PortState: "ACTIVE",
			Since: metav1.NewTime(since.Truncate(time.Second))}
	}
	start := time.Now().Add(-time.Hour)

	// The policy takes effect once the API server's admission has seen it:
	// the first refusal of another node's object is waited for.
	other := publish.New(agent, simNode, "uid-sim")
	var denied error
	if err := kubecluster.WaitFor(20*time.Second, 250*time.Millisecond, "the admission policy in force", func() (bool, error) {
		_, denied = other.Publish(ctx, []v1alpha1.VF{vf("0000:18:00.2", shared, start)})
		if denied == nil {
			_ = c.deleteNodeVFSet(ctx, simNode) // written before the policy was in force
			other = publish.New(agent, simNode, "uid-sim")
		}
		return apierrors.IsForbidden(denied) && strings.Contains(denied.Error(), "only its own node's NodeVFSet"), nil
	}); err != nil {
		t.Fatalf("%v (last answer: %v)", err, denied)
	}

	own := publish.New(agent, kubecluster.NodeName, node.UID)
	if _, err := own.Publish(ctx, []v1alpha1.VF{vf("0000:18:00.2", shared, start.Add(time.Minute)), vf("0000:18:00.3", "a288:c2ff:fe5e:0002", start)}); err != nil {
		t.Fatalf("the agent publishing its own node's NodeVFSet: %v", err)
	}
	deniedReqs := []request{
		{"apply another node's NodeVFSet", func() error {
			_, err := publish.New(agent, simNode, "uid-sim").Publish(ctx, []v1alpha1.VF{vf("0000:18:00.4", shared, start)})
			return byPolicy(err)
		}},
		{"apply its own node's NodeVFSet without the token's node claim", func() error {
			_, err := publish.New(noClaim, kubecluster.NodeName, node.UID).Publish(ctx, []v1alpha1.VF{vf("0000:18:00.4", shared, start)})
			return byPolicy(err)
		}},
		{"patch its own node's status", func() error {
			_, err := agent.Patch(ctx, kubecluster.NodeName, types.MergePatchType, []byte(`{"status":{"findings":[]}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"delete another node's NodeVFSet", func() error {
			return agent.Delete(ctx, simNode, metav1.DeleteOptions{})
		}},
		{"the controller patching a spec", func() error {
			_, err := ctlClient.Patch(ctx, kubecluster.NodeName, types.MergePatchType, []byte(`{"spec":{"vfs":[]}}`), metav1.PatchOptions{})
			return err
		}},
	}
	// The simulated node (a Node object, so that the garbage collector
	// keeps the NodeVFSet it owns), published by the admin: the VF that
	// came first.
	sim, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: simNode}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(ctx, simNode, metav1.DeleteOptions{}) })
	if _, err := publish.New(admin, simNode, sim.UID).Publish(ctx, []v1alpha1.VF{vf("0000:18:00.2", shared, start)}); err != nil {
		t.Fatal(err)
	}
	for _, d := range deniedReqs {
		if err := d.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403 Forbidden", d.what, err)
		}
	}

	// The real controller under its own account.
	kc, err := kubereport.NewClient(c.impersonatedConfig(fabricUser, nil))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	recorder, broadcaster, err := kubereport.NewEventRecorder(rctx, kc, corev1.EventSource{Component: "sriov-stable-fabric"})
	if err != nil {
		t.Fatal(err)
	}
	ctl := controller.New(controller.Config{Client: ctlClient, Recorder: recorder})
	done := make(chan struct{}, 2)
	go func() { ctl.Run(rctx); done <- struct{}{} }()
	go func() { ctl.Lead(rctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done; broadcaster.Shutdown() }()

	t0 := time.Now()
	status := func(name string) v1alpha1.NodeVFSetStatus {
		s, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return v1alpha1.NodeVFSetStatus{}
		}
		return s.Status
	}
	second := func(st v1alpha1.NodeVFSetStatus, want bool) bool {
		return slices.ContainsFunc(st.Findings, func(f v1alpha1.Finding) bool {
			return f.Kind == v1alpha1.DuplicateNodeGUID && f.GUID == shared && f.Second == want
		})
	}
	if err := kubecluster.WaitFor(10*time.Second, 50*time.Millisecond, "the duplicate in both statuses", func() (bool, error) {
		return second(status(kubecluster.NodeName), true) && second(status(simNode), false), nil
	}); err != nil {
		t.Fatalf("%v: %s %+v, %s %+v", err, kubecluster.NodeName, status(kubecluster.NodeName), simNode, status(simNode))
	}
	found := time.Since(t0)
	if err := kubecluster.WaitFor(10*time.Second, 100*time.Millisecond, "the node's FabricGUIDConflict event", func() (bool, error) {
		evs, err := c.EventsOf(ctx, "Node", kubecluster.NodeName, controller.ReasonGUIDConflict)
		return len(evs) > 0, err
	}); err != nil {
		t.Fatal(err)
	}
	if f := status(kubecluster.NodeName).Findings[0]; len(f.Others) == 0 || f.Others[0].Node != simNode {
		t.Errorf("the second holder's finding %+v does not name %s", f, simNode)
	}
	obj, err := admin.Get(ctx, kubecluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(obj); got != "spec:"+publish.FieldManager+" status:"+controller.FieldManager {
		t.Errorf("field managers %s, want spec by %s and status by %s", got, publish.FieldManager, controller.FieldManager)
	}
	if o := obj.OwnerReferences; len(o) != 1 || o[0].UID != node.UID {
		t.Errorf("owner references %+v, want the Node %s", o, node.UID)
	}

	// The agent publishing again (a port state changed) leaves the status.
	if _, err := own.Publish(ctx, []v1alpha1.VF{vf("0000:18:00.2", shared, start.Add(time.Minute)), vf("0000:18:00.3", "a288:c2ff:fe5e:0002", start.Add(time.Second))}); err != nil {
		t.Fatal(err)
	}
	if !second(status(kubecluster.NodeName), true) {
		t.Errorf("the agent's apply of spec dropped the controller's status: %+v", status(kubecluster.NodeName))
	}

	// Fixed on this node: both clear.
	t1 := time.Now()
	if _, err := own.Publish(ctx, []v1alpha1.VF{vf("0000:18:00.2", "a288:c2ff:fe5e:0003", time.Now()), vf("0000:18:00.3", "a288:c2ff:fe5e:0002", start.Add(time.Second))}); err != nil {
		t.Fatal(err)
	}
	if err := kubecluster.WaitFor(10*time.Second, 50*time.Millisecond, "both statuses clear", func() (bool, error) {
		return len(status(kubecluster.NodeName).Findings) == 0 && len(status(simNode).Findings) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	figf("14 fabric", "duplicate node GUID across two nodes", "in both statuses %s after the controller started, cleared %s after the fix; %d refused requests",
		found.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond), len(deniedReqs))
}

// byPolicy is err when it is the admission policy's refusal, which names
// the rule; otherwise an error that is not a 403.
func byPolicy(err error) error {
	if err == nil || strings.Contains(err.Error(), "only its own node's NodeVFSet") {
		return err
	}
	return fmt.Errorf("refused, but not by the policy's rule: %v", err)
}

// fabricObjects are the CRD and RBAC of deploy/fabric (not its Deployment:
// this scenario runs the controller in the test, under the Deployment's
// account) and the agent's RBAC and admission policy of
// deploy/fabric-publish.
func fabricObjects() ([]*unstructured.Unstructured, error) {
	cluster, err := kustomizeBuild(filepath.Join(*repoRoot, "deploy", "fabric"))
	if err != nil {
		return nil, err
	}
	agent, err := renderDaemonSet(*versionA, "../fabric-publish")
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range slices.Concat(cluster, agent) {
		switch o.GetKind() {
		case "CustomResourceDefinition", "ServiceAccount", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		case "ClusterRole", "ClusterRoleBinding":
			if !strings.HasPrefix(o.GetName(), "sriov-stable-fabric") && !strings.HasPrefix(o.GetName(), "sriov-stable-agent-fabric") {
				continue
			}
		default:
			continue
		}
		if o.GetKind() == "ServiceAccount" && o.GetName() != "sriov-stable-fabric" {
			continue // the DaemonSet's, which the DaemonSet scenarios own
		}
		out = append(out, o)
	}
	if len(out) != 10 {
		return nil, fmt.Errorf("deploy/fabric and deploy/fabric-publish render %d of the 10 objects this scenario applies", len(out))
	}
	return out, nil
}

// deleteObjects deletes what fabricObjects gave, the CRD last.
func (c *cluster) deleteObjects(ctx context.Context, objs []*unstructured.Unstructured) error {
	var errs []string
	for _, o := range slices.Backward(objs) {
		m, err := c.mapping(o)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		r := c.Dynamic.Resource(m)
		if o.GetNamespace() != "" {
			err = r.Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		} else {
			err = r.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("delete %s %s: %v", o.GetKind(), o.GetName(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// mapping is o's resource, from the API server's discovery.
func (c *cluster) mapping(o *unstructured.Unstructured) (schema.GroupVersionResource, error) {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("%s: %w", gvk, err)
	}
	return m.Resource, nil
}

// applyFabric applies objs and waits until NodeVFSets are served; it
// returns the admin's client of them.
func (c *cluster) applyFabric(t *testing.T, objs []*unstructured.Unstructured) fabricclient.Client {
	t.Helper()
	ctx := context.Background()
	if err := c.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	admin, err := fabricclient.New(c.REST)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubecluster.WaitFor(30*time.Second, 200*time.Millisecond, "NodeVFSets served", func() (bool, error) {
		_, err := admin.List(ctx, metav1.ListOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	return admin
}

// deleteFabric deletes what fabricObjects or deploy/fabric gave and waits
// until the CRD is gone (its objects with it), so that a scenario after
// creates it anew rather than applying over one being deleted.
func (c *cluster) deleteFabric(ctx context.Context, objs []*unstructured.Unstructured) error {
	if err := c.deleteObjects(ctx, objs); err != nil {
		return err
	}
	return kubecluster.WaitFor(60*time.Second, 200*time.Millisecond, "the NodeVFSet CRD gone", func() (bool, error) {
		_, err := c.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1",
			Resource: "customresourcedefinitions"}).Get(ctx, v1alpha1.Resource+"."+v1alpha1.Group, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

func (c *cluster) deleteNodeVFSet(ctx context.Context, name string) error {
	admin, err := fabricclient.New(c.REST)
	if err != nil {
		return err
	}
	return admin.Delete(ctx, name, metav1.DeleteOptions{})
}

// impersonatedConfig is the admin's configuration acting as a service
// account user of the DaemonSet's namespace, with extra user info.
func (c *cluster) impersonatedConfig(user string, extra map[string][]string) *rest.Config {
	cfg := rest.CopyConfig(c.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Extra: extra,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + daemonSetNamespace, "system:authenticated"}}
	return cfg
}

func (c *cluster) fabricClient(t *testing.T, user string, extra map[string][]string) fabricclient.Client {
	t.Helper()
	fc, err := fabricclient.New(c.impersonatedConfig(user, extra))
	if err != nil {
		t.Fatal(err)
	}
	return fc
}

// managers says which field manager owns spec and which status.
func managers(s *v1alpha1.NodeVFSet) string {
	var spec, status []string
	for _, m := range s.ManagedFields {
		if m.FieldsV1 == nil {
			continue
		}
		raw := string(m.FieldsV1.Raw)
		if m.Subresource == "status" && strings.Contains(raw, `"f:status"`) {
			status = append(status, m.Manager)
		}
		if m.Subresource == "" && strings.Contains(raw, `"f:spec"`) {
			spec = append(spec, m.Manager)
		}
	}
	return "spec:" + strings.Join(spec, ",") + " status:" + strings.Join(status, ",")
}

// TestSEFabricDeployed (scenario 14, as shipped): deploy/fabric's
// Deployment (2 replicas, one leading) and the DaemonSet with
// kube-reporting and fabric-publish. The node's agent publishes the
// fixture's VFs; a simulated node (a Node object without a kubelet) then
// publishes the same node GUIDs, earlier. Within 5 s both statuses say so,
// the node has a FabricGUIDConflict Event and the leader's metrics count
// the duplicates; the agent mirrors the verdict and the plugin refuses a
// pod's VF (error 102) naming the simulated node. The simulated node's
// GUIDs fixed, both clear within 5 s and the pod starts.
func TestSEFabricDeployed(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ctx := context.Background()
	ds, err := c.Client.AppsV1().DaemonSets(daemonSetNamespace).Get(ctx, daemonSetName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimPrefix(ds.Spec.Template.Spec.Containers[0].Image, *imageName+":")
	fabric, err := renderOverlay("../fabric", version)
	if err != nil {
		t.Fatal(err)
	}
	sim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: simNode}}
	t.Cleanup(func() {
		_ = c.DeletePods(ctx, 60*time.Second, "fabric-dup")
		_ = c.Client.CoreV1().Nodes().Delete(ctx, simNode, metav1.DeleteOptions{})
		if err := c.deleteFabric(ctx, fabric); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		reportingNow = "" // the next reporting scenario deploys its own
	})
	admin := c.applyFabric(t, fabric)
	objs, err := renderDaemonSet(version, componentReporting, "../fabric-publish", "../fabric-taint")
	if err != nil {
		t.Fatal(err)
	}
	reportingNow = ""
	if _, err := c.applyDaemonSet(ctx, objs, version, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	var leader string
	if err := kubecluster.WaitFor(120*time.Second, 250*time.Millisecond, "the controller's 2 replicas ready, one leading", func() (bool, error) {
		d, err := c.Client.AppsV1().Deployments(daemonSetNamespace).Get(ctx, "sriov-stable-fabric", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		l, err := c.Client.CoordinationV1().Leases(daemonSetNamespace).Get(ctx, "sriov-stable-fabric", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, fmt.Errorf("deployment %+v; lease: %v", d.Status, err)
		}
		leader = *l.Spec.HolderIdentity
		return d.Status.ReadyReplicas == 2, fmt.Errorf("deployment %+v", d.Status)
	}); err != nil {
		t.Fatal(err)
	}
	var own *v1alpha1.NodeVFSet
	if err := kubecluster.WaitFor(60*time.Second, 250*time.Millisecond, "the agent's NodeVFSet of every fixture VF", func() (bool, error) {
		own, err = admin.Get(ctx, kubecluster.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(own.Spec.VFs) == len(c.Node.VFs), fmt.Errorf("%d VFs published, want %d", len(own.Spec.VFs), len(c.Node.VFs))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, sim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sim, err = c.Client.CoreV1().Nodes().Get(ctx, simNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Two of the fixture's VFs published by a DRA driver: the fabric
	// verdict taints them (deploy/fabric-taint).
	tainted := []sysfstest.DGXVF{c.Node.VFs[0], c.Node.VFs[1]}
	if err := c.publishVFs(ctx, tainted...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, draSlice, metav1.DeleteOptions{})
		_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, draDeviceClass, metav1.DeleteOptions{})
	})
	fabricTaints := map[string]string{}
	for _, vf := range tainted {
		fabricTaints[deviceName(vf.PCI)] = finding.TaintFabricGUID + "=duplicate-node-guid"
	}
	// Every VF of the pod's pool, published an hour earlier on the
	// simulated node: whichever VF the pod gets came second.
	var copied []v1alpha1.VF
	for _, v := range own.Spec.VFs {
		if v.PCI == c.Node.ZeroGUID.PCI {
			continue
		}
		copied = append(copied, v1alpha1.VF{PCI: v.PCI, PF: v.PF, NodeGUID: v.NodeGUID, LinkLayer: v.LinkLayer, PortState: v.PortState,
			Since: metav1.NewTime(v.Since.Add(-time.Hour))})
	}
	simPub := publish.New(admin, simNode, sim.UID)
	injected := time.Now()
	if _, err := simPub.Publish(ctx, copied); err != nil {
		t.Fatal(err)
	}
	allSecond := func(st v1alpha1.NodeVFSetStatus, second bool) bool {
		n := 0
		for _, f := range st.Findings {
			if f.Kind == v1alpha1.DuplicateNodeGUID && f.Second == second {
				n++
			}
		}
		return n == len(copied)
	}
	status := func(name string) v1alpha1.NodeVFSetStatus {
		s, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return v1alpha1.NodeVFSetStatus{}
		}
		return s.Status
	}
	if err := kubecluster.WaitFor(5*time.Second, 50*time.Millisecond, "the duplicates in both statuses", func() (bool, error) {
		return allSecond(status(kubecluster.NodeName), true) && allSecond(status(simNode), false), nil
	}); err != nil {
		t.Fatal(err)
	}
	inStatus := time.Since(injected)
	if err := kubecluster.WaitFor(5*time.Second, 100*time.Millisecond, "FabricGUIDConflict events on both nodes", func() (bool, error) {
		a, err := c.EventsOf(ctx, "Node", kubecluster.NodeName, controller.ReasonGUIDConflict)
		if err != nil {
			return false, err
		}
		b, err := c.EventsOf(ctx, "Node", simNode, controller.ReasonGUIDConflict)
		return len(a) > 0 && len(b) > 0, err
	}); err != nil {
		t.Fatal(err)
	}
	inEvents := time.Since(injected)
	metric := fmt.Sprintf(`sriov_stable_fabric_duplicate_guids{kind="%s"} %d`, v1alpha1.DuplicateNodeGUID, len(copied))
	var body []byte
	if err := kubecluster.WaitFor(5*time.Second, 100*time.Millisecond, "the leader's metrics counting them", func() (bool, error) {
		body, err = c.Client.CoreV1().Pods(daemonSetNamespace).ProxyGet("http", leader, "9812", "/metrics", nil).DoRaw(ctx)
		return err == nil && strings.Contains(string(body), metric), err
	}); err != nil {
		t.Fatalf("%v; want %q in:\n%s", err, metric, grepLines(string(body), "sriov_stable_fabric_"))
	}
	inMetrics := time.Since(injected)
	if _, err := c.waitDeviceTaints(ctx, fabricTaints); err != nil {
		t.Fatal(err)
	}
	inTaints := time.Since(injected)
	if inTaints > 5*time.Second {
		t.Errorf("the second holder's DeviceTaintRules %s after the duplicate was published, want within 5 s", inTaints.Round(time.Millisecond))
	}

	// The plugin refuses the pod's VF, naming the node that came first.
	if _, err := c.CreatePod(ctx, kubecluster.PodSpec("fabric-dup", nadVF, kubecluster.ResourceVF)); err != nil {
		t.Fatal(err)
	}
	var refusal string
	if err := kubecluster.WaitFor(90*time.Second, 500*time.Millisecond, "the plugin's refusal naming "+simNode, func() (bool, error) {
		for _, e := range c.PodEvents(ctx, "fabric-dup", corev1.EventTypeWarning) {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "error 102") && strings.Contains(e.Message, simNode) {
				refusal = e.Message
				return true, nil
			}
		}
		return false, fmt.Errorf("events: %s", c.PodTrouble("fabric-dup"))
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl describe pod fabric-dup shows:\n  Warning  FailedCreatePodSandBox  %s", refusal)

	// Fixed on the simulated node: both clear, and the pod starts.
	for i := range copied {
		copied[i].NodeGUID = fmt.Sprintf("a288:c2ff:fe77:%04x", i)
	}
	fixed := time.Now()
	if _, err := simPub.Publish(ctx, copied); err != nil {
		t.Fatal(err)
	}
	if err := kubecluster.WaitFor(5*time.Second, 50*time.Millisecond, "both statuses clear of duplicates", func() (bool, error) {
		return allSecond(status(kubecluster.NodeName), true) == false && len(status(simNode).Findings) == 0 &&
			!slices.ContainsFunc(status(kubecluster.NodeName).Findings, func(f v1alpha1.Finding) bool { return f.Kind == v1alpha1.DuplicateNodeGUID }), nil
	}); err != nil {
		t.Fatal(err)
	}
	cleared := time.Since(fixed)
	if _, err := c.waitDeviceTaints(ctx, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	untainted := time.Since(fixed)
	if _, err := c.WaitRunning(ctx, "fabric-dup", 180*time.Second); err != nil {
		t.Fatalf("%v: %s", err, c.PodTrouble("fabric-dup"))
	}
	podUp := time.Since(fixed)
	figf("14 fabric", "shipped controller: duplicate injected on a simulated node", "in both statuses %s, Events %s, metrics %s, DeviceTaintRules %s",
		inStatus.Round(time.Millisecond), inEvents.Round(time.Millisecond), inMetrics.Round(time.Millisecond), inTaints.Round(time.Millisecond))
	figf("14 fabric", "shipped controller: the duplicate fixed", "cleared in both statuses %s, DeviceTaintRules gone %s; the refused pod running %.1f s after the fix",
		cleared.Round(time.Millisecond), untainted.Round(time.Millisecond), podUp.Seconds())
}

// grepLines are the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, s) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

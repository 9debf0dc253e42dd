package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/controller"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// The Lease the replicas elect their leader by (the command's default
// name) and its namespace.
const (
	leaseNS   = "sriov-stable-fabric"
	leaseName = "sriov-stable-fabric"
)

// How long a step may take before the run gives up on it: far above each
// target, so that a miss is measured, not cut off.
const (
	coldTimeout   = 5 * time.Minute
	verdictWait   = 60 * time.Second
	takeoverLimit = 2 * time.Minute
)

// bench is one run: the cluster, the fleet and what watches it.
type bench struct {
	o     options
	cp    *kubecluster.Cluster
	fleet *fleet
	obs   *observer
	lease *leaseWatch
	rng   *rand.Rand
	logs  string
}

func run(o options, cfg kubecluster.Config) int {
	cp, err := kubecluster.StartControlPlane(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-bench: %v\n", err)
		return 1
	}
	code := 0
	res, err := measure(o, cp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-bench: %v\n", err)
		code = 1
	}
	if _, err := cp.Teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "fleet-bench: TEARDOWN FAILED (the run fails):\n%v\n", err)
		code = 1
	}
	if res != nil {
		text := res.markdown(o)
		fmt.Print(text)
		if missed := res.missed(); len(missed) > 0 {
			fmt.Fprintf(os.Stderr, "fleet-bench: targets missed: %v\n", missed)
			code = 1
		}
		if o.doc != "" && code == 0 {
			if err := writeBlock(o.doc, text); err != nil {
				fmt.Fprintf(os.Stderr, "fleet-bench: %v\n", err)
				code = 1
			} else {
				fmt.Printf("fleet-bench: figures written to %s\n", o.doc)
			}
		}
	}
	return code
}

// measure runs every fleet size; what it measured comes back even when a
// step failed.
func measure(o options, cp *kubecluster.Cluster) (*results, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &bench{o: o, cp: cp, obs: newObserver(), rng: rand.New(rand.NewPCG(o.seed, 1000)), logs: filepath.Join(o.work, "logs")}
	// The fleet's 1,000 agents each have a client of their own; the
	// benchmark shares one, fast enough not to be what is measured.
	rc := rest.CopyConfig(cp.REST)
	rc.QPS, rc.Burst = 1000, 2000
	fc, err := fabricclient.New(rc)
	if err != nil {
		return nil, err
	}
	b.fleet = &fleet{client: fc, kube: cp.Client, vfsPerNode: o.vfs, since: time.Now().Add(-time.Hour).Truncate(time.Second)}
	if err := b.prepare(ctx, fc); err != nil {
		return nil, err
	}
	res := &results{started: time.Now(), vfsPerNode: o.vfs}
	if v, err := cp.Client.Discovery().ServerVersion(); err == nil {
		res.kubernetes = v.GitVersion
	}
	for k, n := range o.scales {
		s, err := b.scale(ctx, n, k == len(o.scales)-1)
		res.scales = append(res.scales, s)
		if err != nil {
			return res, fmt.Errorf("%d nodes: %w", n, err)
		}
	}
	return res, nil
}

// prepare creates the CRD and the namespaces, and starts the watches.
func (b *bench) prepare(ctx context.Context, fc fabricclient.Client) error {
	if err := b.cp.CreateCRD(ctx, b.o.crd); err != nil {
		return err
	}
	for _, ns := range []string{leaseNS, podNamespace} {
		if _, err := b.cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := b.obs.run(ctx, fc, b.cp.Client); err != nil {
		return err
	}
	b.lease = &leaseWatch{}
	return b.lease.run(ctx, b)
}

// scale grows the fleet to n nodes and measures it with two fresh
// replicas; top adds the idle window and the leader killed.
func (b *bench) scale(ctx context.Context, n int, top bool) (*scaleResult, error) {
	s := &scaleResult{nodes: n, vfs: n * b.o.vfs}
	fmt.Printf("fleet-bench: %d nodes: publishing\n", n)
	b.fleet.used = map[int]bool{}
	t0 := time.Now()
	if err := b.fleet.grow(ctx, n, 16); err != nil {
		return s, err
	}
	s.publish = time.Since(t0)
	if err := b.coldStart(ctx, s); err != nil {
		return s, err
	}
	defer func() {
		for _, r := range s.replicas {
			if err := r.stop(syscall.SIGTERM, 30*time.Second); err != nil {
				fmt.Fprintf(os.Stderr, "fleet-bench: %v\n", err)
			}
		}
	}()
	fmt.Printf("fleet-bench: %d nodes: index in %.1f s, statuses current in %.1f s; %d injections\n", n, s.index.Seconds(), s.verdicts.Seconds(), b.o.injections)
	if err := b.inject(ctx, s); err != nil {
		return s, err
	}
	for _, r := range s.replicas {
		rss, peak, err := r.memory()
		if err != nil {
			return s, err
		}
		s.rss, s.peak = max(s.rss, rss), max(s.peak, peak)
	}
	if !top {
		return s, nil
	}
	if err := b.copyNode(ctx, s); err != nil {
		return s, err
	}
	if err := b.idle(ctx, s); err != nil {
		return s, err
	}
	return s, b.takeover(ctx, s)
}

// coldStart starts both replicas over the published fleet and waits for
// both indexes complete (their metrics) and every status current.
func (b *bench) coldStart(ctx context.Context, s *scaleResult) error {
	kc := b.cp.PKI.Kubeconfig
	t0 := time.Now()
	for i, id := range []string{"replica-a", "replica-b"} {
		r, err := startReplica(b.o.agent, kc, leaseNS, id, fmt.Sprintf("127.0.0.1:%d", 9812+i), filepath.Join(b.logs, fmt.Sprintf("fabric-%s-%d.log", id, s.nodes)))
		if err != nil {
			return err
		}
		s.replicas = append(s.replicas, r)
	}
	for _, r := range s.replicas {
		err := waitPoll(ctx, coldTimeout, 100*time.Millisecond, func() (bool, error) {
			if r.exited() {
				return false, fmt.Errorf("the fabric controller %s exited (log in %s)", r.id, b.logs)
			}
			m, err := r.metrics(ctx)
			if err != nil {
				return false, nil // not listening yet
			}
			return m["sriov_stable_fabric_nodes"] == float64(s.nodes) && m["sriov_stable_fabric_vfs"] == float64(s.vfs), nil
		})
		if err != nil {
			return fmt.Errorf("the index of %s: %w", r.id, err)
		}
		s.index = max(s.index, time.Since(t0))
	}
	names := b.fleet.names()
	if _, ok := b.obs.waitFor(coldTimeout, func() bool { return b.obs.allClean(names) }); !ok {
		return fmt.Errorf("not every status current and clean %s after the start", coldTimeout)
	}
	s.verdicts = time.Since(t0)
	leader, err := b.leader(ctx, s)
	if err != nil {
		return err
	}
	m, err := leader.metrics(ctx)
	if err != nil {
		return err
	}
	s.startWrites = int(m["sriov_stable_fabric_status_writes_total"])
	// The shipped hostconfig's scheme: not one finding of any kind.
	s.findings = b.obs.findings()
	if s.findings != 0 {
		return fmt.Errorf("%d findings on a fleet whose GUIDs hostconfig derived: the scheme or the ledger is wrong", s.findings)
	}
	return nil
}

// inject injects and removes duplicates on distinct pairs while the
// nodes last.
func (b *bench) inject(ctx context.Context, s *scaleResult) error {
	for range b.o.injections {
		in := b.fleet.pick(b.rng)
		t, err := b.once(ctx, in, func() error { return nil })
		if err != nil {
			return err
		}
		s.detect = append(s.detect, t.found.Sub(t.injected))
		s.clear = append(s.clear, t.cleared.Sub(t.removed))
	}
	return nil
}

// times of one injection: published, seen in both statuses with both
// Events, removed, seen cleared the same way.
type times struct{ injected, found, removed, cleared time.Time }

// once injects in, waits for its findings on both nodes and their Events,
// removes it and waits for both clear again; between the injection and
// the wait it runs mid.
func (b *bench) once(ctx context.Context, in injection, mid func() error) (times, error) {
	var t times
	pa, pb := in.a.vfs[in.i].PCI, in.b.vfs[in.j].PCI
	t0 := time.Now()
	t.injected = t0
	if err := b.fleet.inject(ctx, in); err != nil {
		return t, err
	}
	if err := mid(); err != nil {
		return t, err
	}
	seen, ok := b.obs.waitFor(verdictWait, func() bool {
		return b.obs.hasFinding(in.a.name, pa, v1alpha1.DuplicateNodeGUID) && b.obs.hasFinding(in.b.name, pb, v1alpha1.DuplicateNodeGUID) &&
			b.obs.eventSince(t0, in.a.name, controller.ReasonGUIDConflict) && b.obs.eventSince(t0, in.b.name, controller.ReasonGUIDConflict)
	})
	if !ok {
		return t, fmt.Errorf("duplicate of %s %s on %s %s: not in both statuses with Events %s after it was published", in.a.name, pa, in.b.name, pb, verdictWait)
	}
	t.found = seen
	t1 := time.Now()
	t.removed = t1
	if err := b.fleet.restore(ctx, in); err != nil {
		return t, err
	}
	seen, ok = b.obs.waitFor(verdictWait, func() bool {
		return b.obs.clean(in.a.name) && b.obs.clean(in.b.name) &&
			b.obs.eventSince(t1, in.a.name, controller.ReasonGUIDCleared) && b.obs.eventSince(t1, in.b.name, controller.ReasonGUIDCleared)
	})
	if !ok {
		return t, fmt.Errorf("duplicate of %s on %s removed: not cleared in both statuses with Events %s after", in.a.name, in.b.name, verdictWait)
	}
	t.cleared = seen
	return t, nil
}

// copyNode has one node publish another's node and port GUIDs on all its
// VFs, waits for every one of them found on both nodes, runs fabric
// report (which must list each GUID and exit 1), puts the node's own
// GUIDs back and runs the report again (exit 0).
func (b *bench) copyNode(ctx context.Context, s *scaleResult) error {
	in := b.fleet.pick(b.rng)
	from, to := in.a, in.b
	fmt.Printf("fleet-bench: %d nodes: %s copies the GUIDs of %s\n", s.nodes, to.name, from.name)
	t0 := time.Now()
	if err := b.fleet.copyGUIDs(ctx, from, to); err != nil {
		return err
	}
	all := func(node string) bool {
		for _, v := range from.vfs { // every node has the same VFs
			if !b.obs.hasFinding(node, v.PCI, v1alpha1.DuplicateNodeGUID) || !b.obs.hasFinding(node, v.PCI, v1alpha1.DuplicatePortGUID) {
				return false
			}
		}
		return true
	}
	seen, ok := b.obs.waitFor(verdictWait, func() bool {
		return all(from.name) && all(to.name) && b.obs.eventSince(t0, from.name, controller.ReasonGUIDConflict) &&
			b.obs.eventSince(t0, to.name, controller.ReasonGUIDConflict)
	})
	if !ok {
		return fmt.Errorf("%s copying the GUIDs of %s: not every VF of both found within %s", to.name, from.name, verdictWait)
	}
	s.copyFound = seen.Sub(t0)
	var err error
	if s.copyReport, s.copyReportTook, err = b.report(ctx, 1); err != nil {
		return err
	}
	t1 := time.Now()
	if err := b.fleet.restoreAll(ctx, to); err != nil {
		return err
	}
	seen, ok = b.obs.waitFor(verdictWait, func() bool {
		return b.obs.clean(from.name) && b.obs.clean(to.name) && b.obs.eventSince(t1, from.name, controller.ReasonGUIDCleared) &&
			b.obs.eventSince(t1, to.name, controller.ReasonGUIDCleared)
	})
	if !ok {
		return fmt.Errorf("%s with its own GUIDs again: not cleared within %s", to.name, verdictWait)
	}
	s.copyCleared = seen.Sub(t1)
	if s.cleanReport, _, err = b.report(ctx, 0); err != nil {
		return err
	}
	s.copyMeasured = true
	return nil
}

// report runs sriov-stable-agent fabric report as an operator would and
// returns its last line (the summary) and how long it took; its exit
// status must be want.
func (b *bench) report(ctx context.Context, want int) (string, time.Duration, error) {
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, b.o.agent, "fabric", "report", "--kubeconfig", b.cp.PKI.Kubeconfig).Output()
	took := time.Since(t0)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		return "", 0, fmt.Errorf("fabric report: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if code != want {
		return last, took, fmt.Errorf("fabric report exited %d, want %d: %s", code, want, last)
	}
	return last, took, nil
}

// idle leaves the fleet alone and counts every write the API server
// served meanwhile, by resource (its own request counters), and the
// Lease renewals among them.
func (b *bench) idle(ctx context.Context, s *scaleResult) error {
	fmt.Printf("fleet-bench: %d nodes: idle for %s\n", s.nodes, b.o.idle)
	before, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	renewals, seen := b.lease.renewals(), b.obs.counts()
	select {
	case <-time.After(b.o.idle):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	s.idleWrites = map[string]int{}
	for k, v := range after {
		if d := int(v - before[k]); d != 0 {
			s.idleWrites[k] = d
		}
	}
	s.idleRenewals = b.lease.renewals() - renewals
	now := b.obs.counts()
	s.idleSeen = counts{statuses: now.statuses - seen.statuses, specs: now.specs - seen.specs, events: now.events - seen.events}
	s.idleMeasured = true
	return nil
}

// takeover kills the leader (SIGKILL: no release), injects a duplicate
// while no replica leads, and measures the other replica taking the
// Lease, then its verdicts; any status write on another node meanwhile
// is a finding that flapped.
func (b *bench) takeover(ctx context.Context, s *scaleResult) error {
	leader, err := b.leader(ctx, s)
	if err != nil {
		return err
	}
	var other *replica
	for _, r := range s.replicas {
		if r != leader {
			other = r
		}
	}
	fmt.Printf("fleet-bench: %d nodes: killing the leader %s\n", s.nodes, leader.id)
	m, err := other.metrics(ctx)
	if err != nil {
		return err
	}
	writes0, before := m["sriov_stable_fabric_status_writes_total"], b.obs.statusWritesOf()
	in := b.fleet.pick(b.rng)
	tk := time.Now()
	if err := leader.stop(syscall.SIGKILL, 10*time.Second); err != nil {
		return err
	}
	var tt time.Time
	t, err := b.once(ctx, in, func() error {
		var ok bool
		tt, ok = b.lease.waitHolder(takeoverLimit, other.id)
		if !ok {
			return fmt.Errorf("%s did not take the Lease within %s of the leader killed", other.id, takeoverLimit)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.takeover = tt.Sub(tk)
	s.afterTakeover = t.found.Sub(tt)
	s.takeoverClear = t.cleared.Sub(t.removed)
	m, err = other.metrics(ctx)
	if err != nil {
		return err
	}
	s.takeoverWrites = int(m["sriov_stable_fabric_status_writes_total"] - writes0)
	after := b.obs.statusWritesOf()
	for node, n := range after {
		if node == in.a.name || node == in.b.name {
			continue
		}
		s.flaps += n - before[node]
	}
	s.takeoverMeasured = true
	return nil
}

// leader is the replica the Lease names.
func (b *bench) leader(ctx context.Context, s *scaleResult) (*replica, error) {
	var got *replica
	err := waitPoll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		holder := b.lease.holder()
		for _, r := range s.replicas {
			if r.id == holder && !r.exited() {
				got = r
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no replica holds the Lease %s/%s: %w", leaseNS, leaseName, err)
	}
	return got, nil
}

// apiWrites are the API server's counts of write requests served, by
// resource (apiserver_request_total, every verb but reads).
func (b *bench) apiWrites(ctx context.Context) (map[string]float64, error) {
	body, err := b.cp.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	return writesByResource(string(body)), nil
}

func waitPoll(ctx context.Context, timeout, every time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not done within %s", timeout)
		case <-t.C:
		}
	}
}

// leaseWatch follows the replicas' Lease: who holds it and how often it
// was written (each renewal is a write).
type leaseWatch struct {
	obs    *observer // its mu guards cur and writes; its waiters wake on a change
	cur    *coordinationv1.Lease
	writes int
}

func (l *leaseWatch) run(ctx context.Context, b *bench) error {
	l.obs = b.obs
	lw := cache.NewListWatchFromClient(b.cp.Client.CoordinationV1().RESTClient(), "leases", leaseNS, fields.OneTermEqualSelector("metadata.name", leaseName))
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.update(obj.(*coordinationv1.Lease), false) },
		UpdateFunc: func(_, obj any) { l.update(obj.(*coordinationv1.Lease), true) },
	})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("the Lease informer did not sync")
	}
	return nil
}

func (l *leaseWatch) update(le *coordinationv1.Lease, write bool) {
	l.obs.mu.Lock()
	defer l.obs.mu.Unlock()
	l.cur = le
	if write {
		l.writes++
	}
	l.obs.notify()
}

func (l *leaseWatch) holder() string {
	l.obs.mu.Lock()
	defer l.obs.mu.Unlock()
	if l.cur == nil || l.cur.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.cur.Spec.HolderIdentity
}

func (l *leaseWatch) renewals() int {
	l.obs.mu.Lock()
	defer l.obs.mu.Unlock()
	return l.writes
}

// waitHolder waits until id holds the Lease and returns when it was seen.
func (l *leaseWatch) waitHolder(timeout time.Duration, id string) (time.Time, bool) {
	return l.obs.waitFor(timeout, func() bool {
		return l.cur != nil && l.cur.Spec.HolderIdentity != nil && *l.cur.Spec.HolderIdentity == id
	})
}

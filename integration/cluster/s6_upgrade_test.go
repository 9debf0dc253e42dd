//go:build clustere2e

package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// upgradeCycles is the least number of churn cycles around the upgrade.
const upgradeCycles = 40

// TestS6Upgrade: the DaemonSet rolled to the image of a new version while
// pods churn: no ADD fails (a half-written binary would fail one: the
// installer writes a temporary file and renames it over the old binary), and
// afterwards the installed binary is the new one and answers with the new
// version, and a new pod attaches through it.
func TestS6Upgrade(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ctx := context.Background()
	ch := &churn{c: c, nad: nadVF, prefix: "upgrade", workers: churnWorkers, cycles: upgradeCycles}
	start := time.Now()
	var rollout time.Duration
	err := ch.run(ctx, func(done func() int64) error {
		for done() < 4 {
			time.Sleep(100 * time.Millisecond)
		}
		t0 := time.Now()
		_, err := c.deployDaemonSet(ctx, *versionB, 180*time.Second)
		rollout = time.Since(t0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ch.failures {
		t.Error(f)
	}
	if n := ch.rejected.Load(); n > 0 {
		t.Errorf("%d pods rejected at admission during the upgrade (kubelet was not restarted)", n)
	}
	counts, msgs, _ := c.sandboxFailures(ctx, start)
	for _, m := range msgs {
		t.Errorf("event during the upgrade: %s", m)
	}
	figf("6 upgrade", "rollout a to b while pods churn", "%.1f s; %d cycles, %d failed, FailedCreatePodSandBox %d",
		rollout.Seconds(), ch.done.Load(), len(ch.failures), counts["FailedCreatePodSandBox"])
	want, err := fileSHA256(filepath.Join(*imageDir, "b", "sriov-stable-cni"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fileSHA256(installedPlugin); err != nil || got != want {
		t.Errorf("%s has sha256 %s (%v), version b's binary %s", installedPlugin, got, err, want)
	}
	v, err := installedVersion()
	if err != nil || v != *versionB {
		t.Errorf("the installed plugin answers version %q (%v), want %q", v, err, *versionB)
	}
	figf("6 upgrade", "version answering afterwards", "%s", v)
	ch = &churn{c: c, nad: nadVF, prefix: "after-upgrade", workers: 1, cycles: 1}
	if err := ch.run(ctx, func(func() int64) error { return nil }); err != nil || len(ch.failures) > 0 {
		t.Errorf("a pod after the upgrade: %v %v", err, ch.failures)
	}
	c.checkNodeClean(t, "after the upgrade", false)
}

package sysfs_test

import (
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func BenchmarkGUIDHolders(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	r := sysfs.Reader{Root: n.Root}
	vf := n.PFs[0].VFs[0]
	g, _ := sysfs.ParseGUID(vf.NodeGUID)
	for b.Loop() {
		if _, err := r.GUIDHolders(g); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadVF(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	r := sysfs.Reader{Root: n.Root}
	vf := n.PFs[0].VFs[0]
	for b.Loop() {
		if _, err := r.ReadVF(vf.PCI); err != nil {
			b.Fatal(err)
		}
	}
}

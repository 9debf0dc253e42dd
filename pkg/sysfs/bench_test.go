package sysfs_test

import (
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func BenchmarkScanGUIDs(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	r := sysfs.Reader{Root: n.Root}
	for b.Loop() {
		if _, err := r.ScanGUIDs(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCurrent is what ADD pays to reuse a saved GUID index instead
// of scanning (plus reading and decoding the index file).
func BenchmarkCurrent(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	r := sysfs.Reader{Root: n.Root}
	idx, err := r.ScanGUIDs()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ok, err := r.Current(idx); !ok || err != nil {
			b.Fatal(ok, err)
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

func BenchmarkGUIDIndexUnmarshal(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	idx, err := sysfs.Reader{Root: n.Root}.ScanGUIDs()
	if err != nil {
		b.Fatal(err)
	}
	data, err := idx.MarshalText()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var back sysfs.GUIDIndex
		if err := back.UnmarshalText(data); err != nil {
			b.Fatal(err)
		}
	}
}

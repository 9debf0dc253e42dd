// Package guest holds the SR-IOV lab's scenarios. They run inside the QEMU
// guest booted by integration/lab/run.sh, against kernel igbvf VFs of
// emulated igb PFs, driving host-device and sriov-stable-cni through libcni
// (and through the Multus thin plugin) exactly as a runtime does.
//
// The scenarios carry the build tag labguest so that a plain `go test ./...`
// on a developer's machine never touches its PCI devices; run.sh compiles
// them with `go test -c -tags labguest` and runs the binary in the guest.
package guest

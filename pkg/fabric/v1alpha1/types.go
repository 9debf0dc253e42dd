// Package v1alpha1 is the fabric ledger's API: NodeVFSet, one cluster-scoped
// object per node (named after it, owned by its Node object) in which the
// node's agent publishes the identities of its VFs (spec) and the fabric
// controller writes what it found about them across the cluster (status).
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group, version and resource of NodeVFSet.
const (
	Group    = "sriov-stable-cni.io"
	Version  = "v1alpha1"
	Kind     = "NodeVFSet"
	ListKind = "NodeVFSetList"
	Resource = "nodevfsets"
)

// SchemeGroupVersion is the group and version NodeVFSet is served at.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// GroupVersionResource is NodeVFSet's resource, for clients that take one.
var GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

// AddToScheme registers NodeVFSet and its list, and the meta types a
// client of the group needs (ListOptions, DeleteOptions...).
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &NodeVFSet{}, &NodeVFSetList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// NodeVFSet is one node's page of the ledger: its VFs' identities, as its
// agent last read them, and the controller's verdict on them.
type NodeVFSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeVFSetSpec   `json:"spec"`
	Status NodeVFSetStatus `json:"status,omitempty"`
}

// NodeVFSetSpec is written by the node's agent alone.
type NodeVFSetSpec struct {
	// VFs are the node's SR-IOV VFs that have (or had, when attached: the
	// record says) an RDMA device, sorted by PCI address.
	VFs []VF `json:"vfs"`
}

// VF is the identity of one VF on the fabric.
type VF struct {
	// PCI is the VF's PCI address (0000:18:00.2).
	PCI string `json:"pci"`
	// PF is its physical function's PCI address.
	PF string `json:"pf,omitempty"`
	// RDMADevice is the name of its RDMA device where the agent sees it
	// (the host's sysfs, or the record of the pod holding it).
	RDMADevice string `json:"rdmaDevice,omitempty"`
	// NodeGUID, PortGUIDs and SysImageGUID are as sysfs writes them
	// (xxxx:xxxx:xxxx:xxxx); empty when the agent could not read them.
	NodeGUID     string   `json:"nodeGUID,omitempty"`
	PortGUIDs    []string `json:"portGUIDs,omitempty"`
	SysImageGUID string   `json:"sysImageGUID,omitempty"`
	// LinkLayer and PortState are port 1's: InfiniBand or Ethernet, and
	// the logical state (ACTIVE, DOWN, ...).
	LinkLayer string `json:"linkLayer,omitempty"`
	PortState string `json:"portState,omitempty"`
	// Since is when this node first published this VF with this node
	// GUID: of two VFs with one GUID, the earlier keeps it.
	Since metav1.Time `json:"since"`
	// Pod is the pod holding the VF, from its attachment record; none for
	// a free VF.
	Pod *PodRef `json:"pod,omitempty"`
}

// PodRef names a pod.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// NodeVFSetStatus is written by the fabric controller alone.
type NodeVFSetStatus struct {
	// ObservedGeneration is the spec generation the findings are about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Findings are what the controller found about this node's VFs,
	// sorted by PCI address then kind.
	Findings []Finding `json:"findings,omitempty"`
}

// FindingKind names what is wrong.
type FindingKind string

// The kinds of findings.
const (
	// DuplicateNodeGUID: another VF in the cluster has this node GUID.
	DuplicateNodeGUID FindingKind = "DuplicateNodeGUID"
	// DuplicatePortGUID: another VF in the cluster has this port GUID.
	DuplicatePortGUID FindingKind = "DuplicatePortGUID"
	// InvalidGUID: a node or port GUID is all zeros or all ones, which the
	// kernel and firmware report for "not assigned".
	InvalidGUID FindingKind = "InvalidGUID"
	// SharedSysImageGUID: a VF of another NIC (another node, or another
	// card of this node) has this system image GUID, so NCCL takes the
	// two NICs for one.
	SharedSysImageGUID FindingKind = "SharedSysImageGUID"
	// LinkLayerMismatch (info): the other nodes' VFs of this rail (the
	// same PF position) mostly have another link layer.
	LinkLayerMismatch FindingKind = "LinkLayerMismatch"
)

// Kinds are all the kinds of findings, in the order a node's findings
// about one VF are sorted.
var Kinds = []FindingKind{DuplicateNodeGUID, DuplicatePortGUID, InvalidGUID, SharedSysImageGUID, LinkLayerMismatch}

// Severity of a finding.
type Severity string

// The severities.
const (
	SeverityError Severity = "error"
	SeverityInfo  Severity = "info"
)

// Finding is one thing wrong with one VF, seen across the cluster.
type Finding struct {
	Kind     FindingKind `json:"kind"`
	Severity Severity    `json:"severity"`
	// PCI is the VF's PCI address.
	PCI string `json:"pci"`
	// GUID is the GUID in question, or for LinkLayerMismatch the VF's link
	// layer.
	GUID string `json:"guid,omitempty"`
	// Second is true when this VF came after another holder of the GUID
	// (a later Since, then node name and PCI address): the one to fix or
	// to keep from the scheduler. The first holder's finding has it false.
	Second bool `json:"second,omitempty"`
	// Others are the other holders, sorted by who came first (at most
	// MaxOthers of them).
	Others  []Holder `json:"others,omitempty"`
	Message string   `json:"message"`
}

// MaxOthers bounds the holders a finding lists: on a cluster whose every
// node was given one GUID list, every duplicate has a holder per node.
const MaxOthers = 8

// Holder is one VF holding a GUID.
type Holder struct {
	Node string  `json:"node"`
	PCI  string  `json:"pci"`
	Pod  *PodRef `json:"pod,omitempty"`
}

// NodeVFSetList is a list of NodeVFSets.
type NodeVFSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeVFSet `json:"items"`
}

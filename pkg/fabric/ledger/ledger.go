// Package ledger is the fabric controller's index: every node's VFs by
// node, port and system image GUID, and what is wrong with a node's VFs
// seen across the cluster (duplicate or unassigned GUIDs, one system image
// GUID on two NICs, a rail whose link layer differs). It is pure: the
// controller feeds it the nodes' published VF sets and writes the findings
// it returns.
package ledger

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Ledger is the index. It is not safe for concurrent use: the controller
// owns one and updates it from one goroutine.
type Ledger struct {
	nodes map[string]*page
	// Holders of each valid GUID, in no order; an entry appears once per
	// GUID it holds.
	nodeGUIDs map[sysfs.GUID][]*entry
	portGUIDs map[sysfs.GUID][]*entry
	sysGUIDs  map[sysfs.GUID][]*entry
	// rails counts, per rail and link layer, the nodes whose VFs of that
	// rail have that link layer.
	rails map[int]map[string]int
}

// page is one node's VFs as last set.
type page struct {
	vfs   []*entry
	rails map[int]string // rail → its link layer on this node
}

// entry is one VF in the index.
type entry struct {
	node  string
	vf    v1alpha1.VF
	since time.Time
	nic   string // node and PF slot: functions of one card share a system image GUID
	rail  int
	node0 sysfs.GUID   // the node GUID, when valid
	ports []sysfs.GUID // the valid port GUIDs
	sys   sysfs.GUID   // the system image GUID, when valid
	bad   []badGUID    // GUIDs that are unassigned or not GUIDs
}

type badGUID struct {
	what, value string
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{nodes: map[string]*page{}, nodeGUIDs: map[sysfs.GUID][]*entry{},
		portGUIDs: map[sysfs.GUID][]*entry{}, sysGUIDs: map[sysfs.GUID][]*entry{}, rails: map[int]map[string]int{}}
}

// Nodes is the number of nodes in the ledger.
func (l *Ledger) Nodes() int { return len(l.nodes) }

// Set replaces node's VFs with vfs (a node without any is removed) and
// returns the nodes whose findings may have changed with it, sorted: the
// node itself and every node holding one of the GUIDs it held or now
// holds, and every node of a rail whose usual link layer changed.
func (l *Ledger) Set(node string, vfs []v1alpha1.VF) []string {
	affected := map[string]bool{node: true}
	before := l.majorities()
	if old := l.nodes[node]; old != nil {
		l.unindex(old, affected)
		delete(l.nodes, node)
	}
	if len(vfs) > 0 {
		p := newPage(node, vfs)
		l.nodes[node] = p
		l.index(p, affected)
	}
	after := l.majorities()
	for rail, layer := range after {
		if before[rail] != layer {
			l.railNodes(rail, affected)
		}
	}
	for rail := range before {
		if _, ok := after[rail]; !ok {
			l.railNodes(rail, affected)
		}
	}
	return slices.Sorted(maps.Keys(affected))
}

// Delete removes node; what Set with no VFs does.
func (l *Ledger) Delete(node string) []string { return l.Set(node, nil) }

func newPage(node string, vfs []v1alpha1.VF) *page {
	p := &page{rails: map[int]string{}}
	pfs := map[string]int{}
	for _, v := range vfs {
		pfs[v.PF] = 0
	}
	for i, pf := range slices.Sorted(maps.Keys(pfs)) {
		pfs[pf] = i
	}
	for _, v := range vfs {
		e := &entry{node: node, vf: v, since: v.Since.Time, nic: node + "/" + slot(v.PF), rail: pfs[v.PF]}
		e.node0 = e.parse("node GUID", v.NodeGUID, true)
		for _, s := range v.PortGUIDs {
			if g := e.parse("port GUID", s, true); g != 0 && !slices.Contains(e.ports, g) {
				e.ports = append(e.ports, g)
			}
		}
		e.sys = e.parse("system image GUID", v.SysImageGUID, false)
		if _, ok := p.rails[e.rail]; !ok && v.LinkLayer != "" {
			p.rails[e.rail] = v.LinkLayer
		}
		p.vfs = append(p.vfs, e)
	}
	slices.SortFunc(p.vfs, func(a, b *entry) int { return strings.Compare(a.vf.PCI, b.vf.PCI) })
	return p
}

// parse reads a published GUID: a valid one is returned; an empty one
// (not read) is 0; an unassigned one (all zeros or all ones) or one that
// is not a GUID is noted as bad when judged, and is 0.
func (e *entry) parse(what, s string, judged bool) sysfs.GUID {
	if s == "" {
		return 0
	}
	g, err := sysfs.ParseGUID(s)
	if err == nil && g.Valid() {
		return g
	}
	if judged {
		e.bad = append(e.bad, badGUID{what: what, value: s})
	}
	return 0
}

// slot is a PCI address without its function: the functions of one card.
func slot(pci string) string {
	if i := strings.LastIndexByte(pci, '.'); i > 0 {
		return pci[:i]
	}
	return pci
}

func (l *Ledger) index(p *page, affected map[string]bool) {
	for _, e := range p.vfs {
		if e.node0 != 0 {
			l.nodeGUIDs[e.node0] = append(l.nodeGUIDs[e.node0], e)
			mark(l.nodeGUIDs[e.node0], affected)
		}
		for _, g := range e.ports {
			l.portGUIDs[g] = append(l.portGUIDs[g], e)
			mark(l.portGUIDs[g], affected)
		}
		if e.sys != 0 {
			l.sysGUIDs[e.sys] = append(l.sysGUIDs[e.sys], e)
			mark(l.sysGUIDs[e.sys], affected)
		}
	}
	for rail, layer := range p.rails {
		if l.rails[rail] == nil {
			l.rails[rail] = map[string]int{}
		}
		l.rails[rail][layer]++
	}
}

func (l *Ledger) unindex(p *page, affected map[string]bool) {
	for _, e := range p.vfs {
		if e.node0 != 0 {
			l.nodeGUIDs[e.node0] = remove(l.nodeGUIDs, e.node0, e, affected)
		}
		for _, g := range e.ports {
			l.portGUIDs[g] = remove(l.portGUIDs, g, e, affected)
		}
		if e.sys != 0 {
			l.sysGUIDs[e.sys] = remove(l.sysGUIDs, e.sys, e, affected)
		}
	}
	for rail, layer := range p.rails {
		if l.rails[rail][layer]--; l.rails[rail][layer] == 0 {
			delete(l.rails[rail], layer)
		}
		if len(l.rails[rail]) == 0 {
			delete(l.rails, rail)
		}
	}
}

func mark(holders []*entry, affected map[string]bool) {
	for _, h := range holders {
		affected[h.node] = true
	}
}

// remove takes e out of idx[g], marking the nodes that held g with it, and
// returns what is left (the key is deleted when nothing is).
func remove(idx map[sysfs.GUID][]*entry, g sysfs.GUID, e *entry, affected map[string]bool) []*entry {
	holders := idx[g]
	mark(holders, affected)
	holders = slices.DeleteFunc(holders, func(h *entry) bool { return h == e })
	if len(holders) == 0 {
		delete(idx, g)
		return nil
	}
	return holders
}

// majorities is each rail's usual link layer: the one more than half its
// nodes have; a rail without one is left out.
func (l *Ledger) majorities() map[int]string {
	out := make(map[int]string, len(l.rails))
	for rail, layers := range l.rails {
		total := 0
		for _, n := range layers {
			total += n
		}
		for layer, n := range layers {
			if 2*n > total {
				out[rail] = layer
			}
		}
	}
	return out
}

func (l *Ledger) railNodes(rail int, affected map[string]bool) {
	for name, p := range l.nodes {
		if _, ok := p.rails[rail]; ok {
			affected[name] = true
		}
	}
}

// first orders holders of one GUID: who published it earlier keeps it;
// node name and PCI address break ties, so the order is the same on every
// controller and after a restart.
func first(a, b *entry) int {
	return cmp.Or(a.since.Compare(b.since), strings.Compare(a.node, b.node), strings.Compare(a.vf.PCI, b.vf.PCI))
}

// Findings are what is wrong with node's VFs, sorted by PCI address then
// kind (v1alpha1.Kinds' order); none for a node not in the ledger.
func (l *Ledger) Findings(node string) []v1alpha1.Finding {
	p := l.nodes[node]
	if p == nil {
		return nil
	}
	majority := l.majorities()
	var out []v1alpha1.Finding
	for _, e := range p.vfs {
		if e.node0 != 0 {
			out = appendDuplicate(out, e, v1alpha1.DuplicateNodeGUID, "node GUID", e.node0, l.nodeGUIDs[e.node0])
		}
		for _, g := range e.ports {
			out = appendDuplicate(out, e, v1alpha1.DuplicatePortGUID, "port GUID", g, l.portGUIDs[g])
		}
		for _, b := range e.bad {
			out = append(out, v1alpha1.Finding{Kind: v1alpha1.InvalidGUID, Severity: v1alpha1.SeverityError, PCI: e.vf.PCI, GUID: clipGUID(b.value),
				Message: clip(fmt.Sprintf("VF %s on node %s has %s %q, which is unassigned or not a GUID: the subnet manager cannot use its port; set a GUID unique on the fabric (sriov-stable-agent hostconfig apply)", e.vf.PCI, e.node, b.what, b.value))})
		}
		if e.sys != 0 {
			out = appendSharedSys(out, e, l.sysGUIDs[e.sys])
		}
		if m, ok := majority[e.rail]; ok && e.vf.LinkLayer != "" && e.vf.LinkLayer != m {
			out = append(out, v1alpha1.Finding{Kind: v1alpha1.LinkLayerMismatch, Severity: v1alpha1.SeverityInfo, PCI: e.vf.PCI, GUID: e.vf.LinkLayer,
				Message: clip(fmt.Sprintf("VF %s on node %s (rail %d, PF %s) is %s, most nodes' VFs of rail %d are %s: check the port's link type (mlxconfig LINK_TYPE_P1)", e.vf.PCI, e.node, e.rail, e.vf.PF, e.vf.LinkLayer, e.rail, m))})
		}
	}
	order := map[v1alpha1.FindingKind]int{}
	for i, k := range v1alpha1.Kinds {
		order[k] = i
	}
	slices.SortStableFunc(out, func(a, b v1alpha1.Finding) int {
		return cmp.Or(strings.Compare(a.PCI, b.PCI), cmp.Compare(order[a.Kind], order[b.Kind]))
	})
	return out
}

// appendDuplicate adds e's finding when another VF holds its GUID g.
func appendDuplicate(out []v1alpha1.Finding, e *entry, kind v1alpha1.FindingKind, what string, g sysfs.GUID, holders []*entry) []v1alpha1.Finding {
	if len(holders) < 2 {
		return out
	}
	sorted := slices.SortedFunc(slices.Values(holders), first)
	others := make([]*entry, 0, len(sorted)-1)
	for _, h := range sorted {
		if h != e {
			others = append(others, h)
		}
	}
	second := sorted[0] != e
	f := v1alpha1.Finding{Kind: kind, Severity: v1alpha1.SeverityError, PCI: e.vf.PCI, GUID: g.String(), Second: second, Others: holdersOf(others)}
	verdict := "this VF published it first and keeps it; fix the others"
	if second {
		verdict = fmt.Sprintf("%s published it first: give this VF a GUID unique on the fabric (sriov-stable-agent hostconfig apply) and restart the pod holding it", describe(sorted[0]))
	}
	f.Message = clip(fmt.Sprintf("%s %s of VF %s on node %s is also held by %s; %s", what, g, e.vf.PCI, e.node, list(others), verdict))
	return append(out, f)
}

// appendSharedSys adds e's finding when a VF of another NIC holds its
// system image GUID.
func appendSharedSys(out []v1alpha1.Finding, e *entry, holders []*entry) []v1alpha1.Finding {
	nics := map[string]*entry{}
	for _, h := range holders {
		if h.nic != e.nic && (nics[h.nic] == nil || first(h, nics[h.nic]) < 0) {
			nics[h.nic] = h
		}
	}
	if len(nics) == 0 {
		return out
	}
	others := slices.SortedFunc(maps.Values(nics), first)
	return append(out, v1alpha1.Finding{Kind: v1alpha1.SharedSysImageGUID, Severity: v1alpha1.SeverityError, PCI: e.vf.PCI, GUID: e.sys.String(), Others: holdersOf(others),
		Message: clip(fmt.Sprintf("system image GUID %s of VF %s on node %s (PF %s) is also that of another NIC: %s; NCCL takes the NICs for one device: set the NICs' firmware GUIDs apart (flint sg)", e.sys, e.vf.PCI, e.node, e.vf.PF, list(others)))})
}

func holdersOf(es []*entry) []v1alpha1.Holder {
	out := make([]v1alpha1.Holder, 0, min(len(es), v1alpha1.MaxOthers))
	for _, h := range es[:min(len(es), v1alpha1.MaxOthers)] {
		hh := v1alpha1.Holder{Node: h.node, PCI: h.vf.PCI}
		if h.vf.Pod != nil {
			pod := *h.vf.Pod
			hh.Pod = &pod
		}
		out = append(out, hh)
	}
	return out
}

func describe(e *entry) string {
	s := "node " + e.node + " VF " + e.vf.PCI
	if e.vf.Pod != nil {
		s += " (pod " + e.vf.Pod.Namespace + "/" + e.vf.Pod.Name + ")"
	}
	return s
}

// list names the first few holders and counts the rest.
func list(es []*entry) string {
	const shown = 3
	parts := make([]string, 0, shown+1)
	for _, e := range es[:min(len(es), shown)] {
		parts = append(parts, describe(e))
	}
	if len(es) > shown {
		parts = append(parts, fmt.Sprintf("%d more", len(es)-shown))
	}
	return strings.Join(parts, ", ")
}

// maxMessage is the CRD's bound on a finding's message.
const maxMessage = 1024

func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessage-3], "") + "..."
}

// clipGUID bounds a published value that is not a GUID to the CRD's
// length for one.
func clipGUID(s string) string {
	if len(s) <= 19 {
		return s
	}
	return strings.ToValidUTF8(s[:19], "")
}

// Stats are the ledger's counts, for metrics.
type Stats struct {
	Nodes, VFs int
	// Duplicates counts the GUIDs held by more than one VF (for system
	// image GUIDs: by VFs of more than one NIC), by finding kind.
	Duplicates map[v1alpha1.FindingKind]int
	// Invalid counts the unassigned or malformed GUIDs published.
	Invalid int
}

// Stats counts what the ledger holds now; it walks the index (about a
// millisecond at 64,000 VFs), so it is for a scrape, not a hot path.
func (l *Ledger) Stats() Stats {
	st := Stats{Nodes: len(l.nodes), Duplicates: map[v1alpha1.FindingKind]int{}}
	for _, p := range l.nodes {
		st.VFs += len(p.vfs)
		for _, e := range p.vfs {
			st.Invalid += len(e.bad)
		}
	}
	for _, hs := range l.nodeGUIDs {
		if len(hs) > 1 {
			st.Duplicates[v1alpha1.DuplicateNodeGUID]++
		}
	}
	for _, hs := range l.portGUIDs {
		if len(hs) > 1 {
			st.Duplicates[v1alpha1.DuplicatePortGUID]++
		}
	}
	for _, hs := range l.sysGUIDs {
		for _, h := range hs[1:] {
			if h.nic != hs[0].nic {
				st.Duplicates[v1alpha1.SharedSysImageGUID]++
				break
			}
		}
	}
	return st
}

// Conflict is one GUID that is wrong on the fabric, with every VF holding
// it, the one that keeps it first.
type Conflict struct {
	Kind v1alpha1.FindingKind
	GUID string
	// Field is which GUID of the VF is invalid ("node GUID", "port
	// GUID"); empty for the other kinds.
	Field   string
	Holders []v1alpha1.Holder
}

// Conflicts lists every duplicated node or port GUID, every system image
// GUID on more than one NIC (a holder per NIC) and every invalid GUID,
// sorted by kind then GUID: the fabric report's rows.
func (l *Ledger) Conflicts() []Conflict {
	var out []Conflict
	dup := func(kind v1alpha1.FindingKind, idx map[sysfs.GUID][]*entry, perNIC bool) {
		for g, hs := range idx {
			if perNIC {
				nics := map[string]*entry{}
				for _, h := range hs {
					if cur := nics[h.nic]; cur == nil || first(h, cur) < 0 {
						nics[h.nic] = h
					}
				}
				hs = slices.Collect(maps.Values(nics))
			}
			if len(hs) > 1 {
				out = append(out, Conflict{Kind: kind, GUID: g.String(), Holders: allHolders(slices.SortedFunc(slices.Values(hs), first))})
			}
		}
	}
	dup(v1alpha1.DuplicateNodeGUID, l.nodeGUIDs, false)
	dup(v1alpha1.DuplicatePortGUID, l.portGUIDs, false)
	dup(v1alpha1.SharedSysImageGUID, l.sysGUIDs, true)
	for _, p := range l.nodes {
		for _, e := range p.vfs {
			for _, b := range e.bad {
				out = append(out, Conflict{Kind: v1alpha1.InvalidGUID, GUID: clipGUID(b.value), Field: b.what, Holders: allHolders([]*entry{e})})
			}
		}
	}
	order := map[v1alpha1.FindingKind]int{}
	for i, k := range v1alpha1.Kinds {
		order[k] = i
	}
	slices.SortFunc(out, func(a, b Conflict) int {
		return cmp.Or(cmp.Compare(order[a.Kind], order[b.Kind]), strings.Compare(a.GUID, b.GUID),
			strings.Compare(a.Holders[0].Node, b.Holders[0].Node), strings.Compare(a.Holders[0].PCI, b.Holders[0].PCI),
			strings.Compare(a.Field, b.Field))
	})
	return out
}

func allHolders(es []*entry) []v1alpha1.Holder {
	out := make([]v1alpha1.Holder, len(es))
	for i, e := range es {
		out[i] = v1alpha1.Holder{Node: e.node, PCI: e.vf.PCI, Pod: e.vf.Pod}
	}
	return out
}

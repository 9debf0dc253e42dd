package promexport

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

// perAttachment are the series of each recorded attachment, labelled with
// its pod as ADD read it from CNI_ARGS (empty for records of earlier
// releases or of runtimes that pass no K8S_POD_* arguments). Their number
// is bounded by the node: per record (each holds one VF) one info series
// and one series per drift reason (0 or 1, as the aggregated gauge shows
// zeros); a record that goes leaves no series behind. The label is
// container_id, not container, as Prometheus' Kubernetes discovery gives
// container (the name) to the scrape target.
type perAttachment struct {
	info, driftReasons *prometheus.Desc
}

var attachmentSeries = newPerAttachment()

var attachmentLabels = []string{"network", "namespace", "pod", "container_id", "ifname", "pci"}

func newPerAttachment() perAttachment {
	return perAttachment{
		info: prometheus.NewDesc(prometheus.BuildFQName(metricsNS, "", "attachment_info"),
			"One series per recorded attachment (value 1): its pod, VF, recorded node GUID and status (ok, drifted, stale, unknown).",
			slices.Concat(attachmentLabels, []string{"node_guid", "status"}), nil),
		driftReasons: prometheus.NewDesc(prometheus.BuildFQName(metricsNS, "", "attachment_drift_reasons"),
			"Whether an attachment drifts (1) or not (0) for each reason, with its pod and VF.",
			slices.Concat(attachmentLabels, []string{"reason"}), nil),
	}
}

func (p perAttachment) describe(ch chan<- *prometheus.Desc) {
	ch <- p.info
	ch <- p.driftReasons
}

// collect emits the series of every attachment; of two whose labels are
// alike once made valid UTF-8 (records whose keys differ only in bytes
// that are not), the first, as a duplicate series would fail the scrape.
func (p perAttachment) collect(ch chan<- prometheus.Metric, atts []status.Attachment) {
	seen := make(map[string]bool, len(atts))
	for _, a := range atts {
		r := a.Record
		labels := labelValues([]string{r.Network, r.PodNamespace, r.PodName, r.ContainerID, r.IfName, r.PCI})
		if k := strings.Join(labels, "\x00"); seen[k] {
			continue
		} else {
			seen[k] = true
		}
		ch <- prometheus.MustNewConstMetric(p.info, prometheus.GaugeValue, 1, slices.Concat(labels, []string{labelValue(r.NodeGUID), string(a.Status)})...)
		for _, reason := range drift.Reasons {
			v := 0.0
			if slices.Contains(a.Drift, reason) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(p.driftReasons, prometheus.GaugeValue, v, slices.Concat(labels, []string{string(reason)})...)
		}
	}
}

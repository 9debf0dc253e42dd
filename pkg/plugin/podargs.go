package plugin

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// podArgs is the pod's identity in CNI_ARGS, as Multus passes it to every
// delegate and the CRI runtimes to every plugin of a list:
// IgnoreUnknown=1;K8S_POD_NAMESPACE=…;K8S_POD_NAME=…;K8S_POD_INFRA_CONTAINER_ID=…;K8S_POD_UID=…
// The field names are those keys (types.LoadArgs matches them).
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString
	K8S_POD_NAME               types.UnmarshallableString
	K8S_POD_UID                types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString
}

// podArgs reads the pod's identity from CNI_ARGS. It only labels the
// record (for the agent's logs, metrics and events): arguments it cannot
// read cost the attachment nothing, and other keys are not its business.
func (p *Plugin) podArgs(args *skel.CmdArgs) podArgs {
	pa := podArgs{CommonArgs: types.CommonArgs{IgnoreUnknown: true}}
	if err := types.LoadArgs(args.Args, &pa); err != nil {
		p.log.Debug("CNI_ARGS not fully readable; the record keeps what was read", "err", err)
	}
	return pa
}

// SPDX-License-Identifier: GPL-2.0
/*
 * sst_ib - a fake InfiniBand provider for the sriov-stable-cni QEMU lab.
 * Test only: it moves no data and must never be loaded on a real node.
 *
 * The lab's emulated igb PFs and igbvf VFs have no RDMA hardware, yet the
 * plugin must find a VF's RDMA device the way it does on a Mellanox node:
 * under /sys/bus/pci/devices/<pci>/infiniband/<dev>/, through RDMA netlink,
 * in whichever network namespace ib_core put the device. This module
 * registers one ib_device with the real ib_core for each PCI function named
 * in pcis=, with that function as its parent and DMA device (as mlx5_ib
 * does), so sysfs, RDMA netlink and ib_core's netns handling treat it like a
 * real adapter. Each device has one InfiniBand port whose GID 0 is
 * fe80::/64 + the node GUID and whose only P_Key is 0xffff.
 *
 * Parameters (one entry per entry of pcis, in the same order):
 *   pcis=0000:01:10.0,0000:01:10.2     read-only; the PCI functions
 *   node_guids=0x0002c90300a1b2c3,0    writable; 0 is an unassigned GUID; a
 *                                      missing entry gets a distinct
 *                                      non-zero GUID made from its index
 *   sys_image_guids=...                read-only; a missing or 0 entry
 *                                      follows the node GUID
 *   port_states=4,1                    writable; logical state of port 1:
 *                                      1 DOWN ... 4 ACTIVE (default),
 *                                      5 ACTIVE_DEFER; physical state is
 *                                      3 Disabled when DOWN, else 5 LinkUp
 * A write to /sys/module/sst_ib/parameters/node_guids or port_states
 * replaces the whole array and shows at once in sysfs and RDMA netlink; the
 * module then dispatches IB_EVENT_GID_CHANGE, or IB_EVENT_PORT_ACTIVE /
 * IB_EVENT_PORT_ERR, so ib_core's GID cache and state cache follow.
 *
 * Deliberately missing: every data-path verb (PD, CQ, QP, MR, AH). Without
 * them ib_core does not count the device as a kernel verbs provider, so no
 * in-kernel user (MAD, SA, IPoIB, RDMA CM) ever binds to it; and without
 * alloc_ucontext ib_uverbs makes no character device for it. The port has
 * no MAD/SMI/CM/SA capability, so ib_core opens no QP0/QP1 on it.
 * disassociate_ucontext exists (and does nothing: there is never a user
 * context) because ib_core moves a device between network namespaces only
 * when its driver has it.
 *
 * Removing a PCI function (sriov_numvfs=0) unregisters its device first.
 */

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <rdma/ib_verbs.h>

#define SST_IB_MAX 32
#define SST_IB_PORT 1
#define SST_IB_SUBNET_PREFIX 0xfe80000000000000ULL
/* Default GUIDs: 0253:5354:0000:0001, ...: non-zero and distinct. */
#define SST_IB_DEFAULT_GUID_BASE 0x0253535400000000ULL

struct sst_dev {
	struct ib_device ibdev;
	struct pci_dev *pdev;
	unsigned int idx;
};

/* sst_lock guards sst_devs and the values below once the module is live. */
static DEFINE_MUTEX(sst_lock);
static struct sst_dev *sst_devs[SST_IB_MAX];
static unsigned int sst_npcis;
static bool sst_live;

static u64 node_guid_vals[SST_IB_MAX];
static unsigned int node_guid_count;
static u64 sys_image_guid_vals[SST_IB_MAX];
static unsigned int sys_image_guid_count;
static int port_state_vals[SST_IB_MAX];
static unsigned int port_state_count;

static char *pcis;
module_param(pcis, charp, 0444);
MODULE_PARM_DESC(pcis, "comma-separated PCI addresses (0000:01:10.0,...): one InfiniBand device under each");

static struct sst_dev *to_sst(struct ib_device *ibdev)
{
	return container_of(ibdev, struct sst_dev, ibdev);
}

static u64 default_guid(unsigned int i)
{
	return SST_IB_DEFAULT_GUID_BASE + i + 1;
}

static u64 sys_image_guid_of(unsigned int i, u64 node_guid)
{
	if (i < sys_image_guid_count && sys_image_guid_vals[i])
		return sys_image_guid_vals[i];
	return node_guid;
}

static int port_state_of(unsigned int i)
{
	return READ_ONCE(port_state_vals[i]);
}

/* ------------------------------------------------------------ verbs --- */

static int sst_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
			    struct ib_udata *udata)
{
	struct sst_dev *d = to_sst(ibdev);

	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	/* At registration attr is ibdev->attrs itself, zeroed by ib_core. */
	memset(attr, 0, sizeof(*attr));
	attr->sys_image_guid = cpu_to_be64(sys_image_guid_of(d->idx,
				be64_to_cpu(READ_ONCE(ibdev->node_guid))));
	attr->vendor_id = d->pdev->vendor;
	attr->vendor_part_id = d->pdev->device;
	attr->hw_ver = d->pdev->revision;
	attr->max_pkeys = 1;
	return 0;
}

static int sst_query_port(struct ib_device *ibdev, u32 port,
			  struct ib_port_attr *attr)
{
	int state = port_state_of(to_sst(ibdev)->idx);

	/* ib_query_port has zeroed *attr. */
	attr->subnet_prefix = SST_IB_SUBNET_PREFIX;
	attr->state = state;
	attr->phys_state = state == IB_PORT_DOWN ? IB_PORT_PHYS_STATE_DISABLED :
						   IB_PORT_PHYS_STATE_LINK_UP;
	attr->max_mtu = IB_MTU_4096;
	attr->active_mtu = IB_MTU_4096;
	attr->gid_tbl_len = 1;
	attr->pkey_tbl_len = 1;
	attr->max_msg_sz = 1 << 30;
	attr->lid = 0;
	attr->sm_lid = 0;
	attr->active_width = IB_WIDTH_4X;
	attr->active_speed = IB_SPEED_EDR;
	attr->max_vl_num = 1;
	return 0;
}

static int sst_get_port_immutable(struct ib_device *ibdev, u32 port,
				  struct ib_port_immutable *immutable)
{
	/* InfiniBand protocol only: no MAD, SMI, CM or SA, so no QP0/QP1. */
	immutable->core_cap_flags = RDMA_CORE_CAP_PROT_IB;
	immutable->pkey_tbl_len = 1;
	immutable->gid_tbl_len = 1;
	immutable->max_mad_size = 0;
	return 0;
}

static enum rdma_link_layer sst_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_INFINIBAND;
}

static int sst_query_gid(struct ib_device *ibdev, u32 port, int index,
			 union ib_gid *gid)
{
	if (index != 0)
		return -EINVAL;
	gid->global.subnet_prefix = cpu_to_be64(SST_IB_SUBNET_PREFIX);
	gid->global.interface_id = READ_ONCE(ibdev->node_guid);
	return 0;
}

static int sst_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index != 0)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

static void sst_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	snprintf(str, IB_FW_VERSION_NAME_MAX, "sst_ib-test");
}

static void sst_disassociate_ucontext(struct ib_ucontext *uctx)
{
	/* No user context can exist: there is no alloc_ucontext. */
}

static const struct ib_device_ops sst_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.query_device = sst_query_device,
	.query_port = sst_query_port,
	.get_port_immutable = sst_get_port_immutable,
	.get_link_layer = sst_get_link_layer,
	.query_gid = sst_query_gid,
	.query_pkey = sst_query_pkey,
	.get_dev_fw_str = sst_get_dev_fw_str,
	.disassociate_ucontext = sst_disassociate_ucontext,
};

static void sst_dispatch(struct sst_dev *d, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = &d->ibdev,
		.element.port_num = SST_IB_PORT,
		.event = type,
	};

	ib_dispatch_event(&ev);
}

/* ------------------------------------------------------- parameters --- */

/* parse_u64_list parses "a,b,c" (each in any base kstrtou64 takes). */
static int parse_u64_list(const char *val, u64 *out, unsigned int *count)
{
	char *buf, *cur, *tok;
	unsigned int n = 0;
	int ret = 0;

	buf = kstrdup(val, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	cur = strim(buf);
	while (cur && *cur && (tok = strsep(&cur, ",")) != NULL) {
		if (n == SST_IB_MAX) {
			ret = -EINVAL;
			break;
		}
		ret = kstrtou64(strim(tok), 0, &out[n]);
		if (ret)
			break;
		n++;
	}
	kfree(buf);
	*count = n;
	return ret;
}

static int guids_get(char *buf, const u64 *vals, unsigned int n)
{
	int len = 0;
	unsigned int i;

	for (i = 0; i < n; i++)
		len += sysfs_emit_at(buf, len, "%s0x%016llx", i ? "," : "", vals[i]);
	return len + sysfs_emit_at(buf, len, "\n");
}

/* apply_node_guids gives the registered devices their (new) node GUIDs. */
static void apply_node_guids(void)
{
	unsigned int i;

	for (i = 0; i < sst_npcis; i++) {
		struct sst_dev *d = sst_devs[i];
		__be64 guid = cpu_to_be64(node_guid_vals[i]);

		if (!d || d->ibdev.node_guid == guid)
			continue;
		WRITE_ONCE(d->ibdev.node_guid, guid);
		d->ibdev.attrs.sys_image_guid =
			cpu_to_be64(sys_image_guid_of(i, node_guid_vals[i]));
		sst_dispatch(d, IB_EVENT_GID_CHANGE);
	}
}

static int node_guids_set(const char *val, const struct kernel_param *kp)
{
	u64 vals[SST_IB_MAX] = {};
	unsigned int n, i;
	int ret;

	ret = parse_u64_list(val, vals, &n);
	if (ret)
		return ret;
	mutex_lock(&sst_lock);
	for (i = n; i < SST_IB_MAX; i++)
		vals[i] = default_guid(i);
	memcpy(node_guid_vals, vals, sizeof(vals));
	node_guid_count = max(n, sst_npcis);
	if (sst_live)
		apply_node_guids();
	mutex_unlock(&sst_lock);
	return 0;
}

static int node_guids_get(char *buf, const struct kernel_param *kp)
{
	int len;

	mutex_lock(&sst_lock);
	len = guids_get(buf, node_guid_vals, node_guid_count);
	mutex_unlock(&sst_lock);
	return len;
}

static const struct kernel_param_ops node_guids_ops = {
	.set = node_guids_set,
	.get = node_guids_get,
};
module_param_cb(node_guids, &node_guids_ops, NULL, 0644);
MODULE_PARM_DESC(node_guids, "node (and port) GUID of each device, e.g. 0x0002c90300a1b2c3; 0 = unassigned; writable");

/* sys_image_guids is read-only: only the load-time value is ever set. */
static int sys_image_guids_set(const char *val, const struct kernel_param *kp)
{
	return parse_u64_list(val, sys_image_guid_vals, &sys_image_guid_count);
}

static int sys_image_guids_get(char *buf, const struct kernel_param *kp)
{
	return guids_get(buf, sys_image_guid_vals, sys_image_guid_count);
}

static const struct kernel_param_ops sys_image_guids_ops = {
	.set = sys_image_guids_set,
	.get = sys_image_guids_get,
};
module_param_cb(sys_image_guids, &sys_image_guids_ops, NULL, 0444);
MODULE_PARM_DESC(sys_image_guids, "system image GUID of each device; missing or 0 = the node GUID");

static void apply_port_states(const int *old)
{
	unsigned int i;

	for (i = 0; i < sst_npcis; i++) {
		struct sst_dev *d = sst_devs[i];
		int now = port_state_vals[i];

		if (!d || now == old[i])
			continue;
		if (now == IB_PORT_ACTIVE)
			sst_dispatch(d, IB_EVENT_PORT_ACTIVE);
		else if (old[i] == IB_PORT_ACTIVE)
			sst_dispatch(d, IB_EVENT_PORT_ERR);
	}
}

static int port_states_set(const char *val, const struct kernel_param *kp)
{
	u64 vals[SST_IB_MAX];
	int old[SST_IB_MAX];
	unsigned int n, i;
	int ret;

	ret = parse_u64_list(val, vals, &n);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		if (vals[i] < IB_PORT_DOWN || vals[i] > IB_PORT_ACTIVE_DEFER)
			return -EINVAL;
	}

	mutex_lock(&sst_lock);
	memcpy(old, port_state_vals, sizeof(old));
	for (i = 0; i < SST_IB_MAX; i++)
		WRITE_ONCE(port_state_vals[i], i < n ? (int)vals[i] : IB_PORT_ACTIVE);
	port_state_count = max(n, sst_npcis);
	if (sst_live)
		apply_port_states(old);
	mutex_unlock(&sst_lock);
	return 0;
}

static int port_states_get(char *buf, const struct kernel_param *kp)
{
	unsigned int i;
	int len = 0;

	mutex_lock(&sst_lock);
	for (i = 0; i < port_state_count; i++)
		len += sysfs_emit_at(buf, len, "%s%d", i ? "," : "", port_state_vals[i]);
	len += sysfs_emit_at(buf, len, "\n");
	mutex_unlock(&sst_lock);
	return len;
}

static const struct kernel_param_ops port_states_ops = {
	.set = port_states_set,
	.get = port_states_get,
};
module_param_cb(port_states, &port_states_ops, NULL, 0644);
MODULE_PARM_DESC(port_states, "logical state of each device's port 1: 1 DOWN ... 4 ACTIVE (default); writable");

/* ---------------------------------------------------------- devices --- */

static struct pci_dev *lookup_pci(const char *addr)
{
	unsigned int domain, bus, slot, fn;
	char end;

	if (sscanf(addr, "%x:%x:%x.%x%c", &domain, &bus, &slot, &fn, &end) != 4 ||
	    bus > 0xff || slot > 0x1f || fn > 7)
		return NULL;
	return pci_get_domain_bus_and_slot(domain, bus, PCI_DEVFN(slot, fn));
}

static int add_device(unsigned int i, struct pci_dev *pdev)
{
	struct sst_dev *d;
	u64 guid = node_guid_vals[i];
	int ret;

	d = ib_alloc_device(sst_dev, ibdev);
	if (!d)
		return -ENOMEM;
	d->pdev = pdev;
	d->idx = i;
	d->ibdev.node_type = RDMA_NODE_IB_CA;
	d->ibdev.phys_port_cnt = 1;
	d->ibdev.num_comp_vectors = 1;
	d->ibdev.node_guid = cpu_to_be64(guid);
	d->ibdev.dev.parent = &pdev->dev;
	snprintf(d->ibdev.node_desc, sizeof(d->ibdev.node_desc), "sst_ib %s",
		 pci_name(pdev));
	ib_set_device_ops(&d->ibdev, &sst_ops);

	ret = ib_register_device(&d->ibdev, "sstib%d", &pdev->dev);
	if (ret) {
		ib_dealloc_device(&d->ibdev);
		return ret;
	}
	sst_devs[i] = d;
	dev_info(&pdev->dev, "sst_ib: registered %s, node GUID 0x%016llx\n",
		 dev_name(&d->ibdev.dev), guid);
	return 0;
}

/* remove_device unregisters device i and drops its PCI reference. */
static void remove_device(unsigned int i)
{
	struct sst_dev *d = sst_devs[i];
	struct pci_dev *pdev;

	if (!d)
		return;
	sst_devs[i] = NULL;
	pdev = d->pdev;
	ib_unregister_device(&d->ibdev);
	ib_dealloc_device(&d->ibdev);
	pci_dev_put(pdev);
}

static void remove_all(void)
{
	unsigned int i;

	for (i = 0; i < sst_npcis; i++)
		remove_device(i);
}

/*
 * A PCI function going away (sriov_numvfs=0, hot unplug) takes its
 * InfiniBand device with it, as the real driver's remove would; otherwise
 * the ib_device would outlive its parent in sysfs.
 */
static int sst_pci_notify(struct notifier_block *nb, unsigned long action, void *data)
{
	struct device *dev = data;
	unsigned int i;

	if (action != BUS_NOTIFY_DEL_DEVICE)
		return NOTIFY_DONE;
	mutex_lock(&sst_lock);
	for (i = 0; i < sst_npcis; i++) {
		if (sst_devs[i] && &sst_devs[i]->pdev->dev == dev) {
			dev_info(dev, "sst_ib: PCI function removed, unregistering %s\n",
				 dev_name(&sst_devs[i]->ibdev.dev));
			remove_device(i);
		}
	}
	mutex_unlock(&sst_lock);
	return NOTIFY_OK;
}

static struct notifier_block sst_pci_nb = {
	.notifier_call = sst_pci_notify,
};

/* parse_pcis looks up every PCI function of pcis=, holding a reference. */
static int parse_pcis(struct pci_dev **out, unsigned int *count)
{
	char *buf, *cur, *tok;
	unsigned int n = 0, j;
	int ret = 0;

	if (!pcis || !*pcis) {
		pr_err("sst_ib: pcis= names no PCI function\n");
		return -EINVAL;
	}
	buf = kstrdup(pcis, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	cur = strim(buf);
	while ((tok = strsep(&cur, ",")) != NULL) {
		struct pci_dev *pdev;

		tok = strim(tok);
		if (n == SST_IB_MAX) {
			pr_err("sst_ib: more than %d PCI functions in pcis=\n", SST_IB_MAX);
			ret = -EINVAL;
			break;
		}
		pdev = lookup_pci(tok);
		if (!pdev) {
			pr_err("sst_ib: no PCI function %s\n", tok);
			ret = -ENODEV;
			break;
		}
		for (j = 0; j < n; j++) {
			if (out[j] == pdev)
				break;
		}
		if (j < n) {
			pr_err("sst_ib: %s is named twice in pcis=\n", tok);
			pci_dev_put(pdev);
			ret = -EINVAL;
			break;
		}
		out[n++] = pdev;
	}
	kfree(buf);
	if (ret) {
		while (n)
			pci_dev_put(out[--n]);
	}
	*count = n;
	return ret;
}

static int __init sst_init(void)
{
	struct pci_dev *pdevs[SST_IB_MAX] = {};
	unsigned int n, i;
	int ret;

	ret = parse_pcis(pdevs, &n);
	if (ret)
		return ret;
	i = 0;
	ret = bus_register_notifier(&pci_bus_type, &sst_pci_nb);
	if (ret)
		goto put;

	mutex_lock(&sst_lock);
	sst_npcis = n;
	/* Entries node_guids= and port_states= did not give get defaults. */
	for (i = node_guid_count; i < SST_IB_MAX; i++)
		node_guid_vals[i] = default_guid(i);
	node_guid_count = max(node_guid_count, n);
	for (i = port_state_count; i < SST_IB_MAX; i++)
		port_state_vals[i] = IB_PORT_ACTIVE;
	port_state_count = max(port_state_count, n);

	for (i = 0; i < n; i++) {
		ret = add_device(i, pdevs[i]);
		if (ret) {
			dev_err(&pdevs[i]->dev, "sst_ib: registering an InfiniBand device failed: %d\n", ret);
			break;
		}
	}
	if (ret) {
		remove_all();
		mutex_unlock(&sst_lock);
		bus_unregister_notifier(&pci_bus_type, &sst_pci_nb);
		goto put;
	}
	sst_live = true;
	mutex_unlock(&sst_lock);
	return 0;

put:
	/* References of the devices not (or no longer) registered. */
	for (; i < n; i++)
		pci_dev_put(pdevs[i]);
	return ret;
}

static void __exit sst_exit(void)
{
	bus_unregister_notifier(&pci_bus_type, &sst_pci_nb);
	mutex_lock(&sst_lock);
	sst_live = false;
	remove_all();
	mutex_unlock(&sst_lock);
}

module_init(sst_init);
module_exit(sst_exit);

MODULE_DESCRIPTION("sriov-stable-cni lab: fake InfiniBand provider on existing PCI functions (test only)");
MODULE_LICENSE("GPL");

// Package pluginconf holds no code: its tests parse every example in
// plugin-conf/ and the installer DaemonSet in deploy/daemonset/ with the types
// the cluster uses (NetworkAttachmentDefinition client v1.7.7, k8s.io/api,
// libcni and sriov-stable-cni's own config validation), strictly.
package pluginconf

{{/* The image every container runs. */}}
{{- define "sriov-stable-cni.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels on every object: the project's, then Helm's bookkeeping. */}}
{{- define "sriov-stable-cni.labels" -}}
app.kubernetes.io/part-of: sriov-stable-cni
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* The node agent's service account, as an RBAC subject. */}}
{{- define "sriov-stable-cni.agentSubject" -}}
subjects:
  - kind: ServiceAccount
    name: sriov-stable-cni
    namespace: {{ .Release.Namespace }}
{{- end }}

{{- define "sriov-stable-cni.checkValues" -}}
{{- if and .Values.agent.fabric.publish (not .Values.agent.kubeReporting.enabled) }}
{{- fail "agent.fabric.publish needs agent.kubeReporting.enabled (its token and --in-cluster)" }}
{{- end }}
{{- if and .Values.agent.fabric.taint (not .Values.agent.fabric.publish) }}
{{- fail "agent.fabric.taint needs agent.fabric.publish" }}
{{- end }}
{{- if and .Values.agent.kubeReporting.taintOnError (not .Values.agent.kubeReporting.enabled) }}
{{- fail "agent.kubeReporting.taintOnError needs agent.kubeReporting.enabled" }}
{{- end }}
{{- if contains "host" .Values.agent.repair }}
{{- fail "agent.repair host needs the host's network namespace, which this chart does not give the agent (docs/monitor.md, \"Repairs\")" }}
{{- end }}
{{- end }}

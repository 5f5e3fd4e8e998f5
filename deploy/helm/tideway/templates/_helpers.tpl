{{/* Names and labels shared by every object of the chart. Every object also carries its
role's selector labels, which name the release (app.kubernetes.io/instance). */}}
{{- define "tideway.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "tideway.labels" -}}
app.kubernetes.io/part-of: tideway
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "tideway.federation.selector" -}}
app.kubernetes.io/name: tideway
app.kubernetes.io/component: federation
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tideway.agent.selector" -}}
app.kubernetes.io/name: tideway-agent
app.kubernetes.io/component: agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tideway.peers" -}}
{{ .Release.Name }}-peers
{{- end }}

{{/* The Secrets the pods mount: named in values, else named after the release. */}}
{{- define "tideway.authSecret" -}}
{{ .Values.federation.auth.existingSecret | default (printf "%s-auth" .Release.Name) }}
{{- end }}

{{- define "tideway.clusterSecret" -}}
{{ .Values.federation.clusterSecret.existingSecret | default (printf "%s-cluster" .Release.Name) }}
{{- end }}

{{- define "tideway.agentTokenSecret" -}}
{{ .Values.agent.token.existingSecret | default (printf "%s-agent-token" .Release.Name) }}
{{- end }}

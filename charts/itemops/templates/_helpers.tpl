{{/* The name of the chart's objects. */}}
{{- define "itemops.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "itemops" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-itemops" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Velero's namespace: where itemops runs and watches. */}}
{{- define "itemops.namespace" -}}
{{- default .Release.Namespace .Values.veleroNamespace -}}
{{- end -}}

{{- define "itemops.selectorLabels" -}}
app.kubernetes.io/name: itemops
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "itemops.labels" -}}
{{ include "itemops.selectorLabels" . }}
app.kubernetes.io/part-of: itemops
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "itemops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "itemops.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "itemops.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the built-in plugins are those of a Velero before v1.18, whose
data mover plugin lists DataUploads in every namespace
(files/rbac/velero_plugins_before_1.18.yaml). A tag that is no version
(latest, a build of your own) gets the rule too: with it every release works.
*/}}
{{- define "itemops.builtinPluginsBefore118" -}}
{{- $release := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" (.Values.builtinPlugins.image.tag | toString) -}}
{{- if or (not $release) (semverCompare "<1.18.0-0" (default "0.0.0" $release)) -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret with the metrics server's certificate, if any. */}}
{{- define "itemops.metricsCertSecret" -}}
{{- if .Values.metrics.tls.secretName -}}
{{- .Values.metrics.tls.secretName -}}
{{- else if .Values.metrics.tls.certManager.enabled -}}
{{- printf "%s-metrics-tls" (include "itemops.fullname" .) -}}
{{- end -}}
{{- end -}}

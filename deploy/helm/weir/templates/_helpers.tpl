{{- define "weir.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "weir.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "weir.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weir.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "weir.labels" -}}
{{ include "weir.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "weir.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "weir.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The configuration file: the user's config plus what the chart owns. */}}
{{- define "weir.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- range $k := list "state" "http" "process" -}}
{{- if not (hasKey $c $k) -}}{{- $_ := set $c $k dict -}}{{- end -}}
{{- end -}}
{{- if hasKey $c.state "dir" -}}{{- fail "config.state.dir is set by the chart (the pod's volume); remove it" -}}{{- end -}}
{{- if hasKey $c.http "address" -}}{{- fail "config.http.address is set by the chart from httpPort; remove it" -}}{{- end -}}
{{- if hasKey $c.process "replica_id" -}}{{- fail "config.process.replica_id is set by the chart (the pod's name); remove it" -}}{{- end -}}
{{- $job := required "config.job is required (name, pipeline)" $c.job -}}
{{- $_ := required "config.job.name is required" $job.name -}}
{{- $_ := required "config.job.pipeline is required" $job.pipeline -}}
{{- $kafka := required "config.kafka.brokers is required" $c.kafka -}}
{{- $_ := required "config.kafka.brokers is required" $kafka.brokers -}}
{{- $cp := required "config.checkpoint.storage is required (s3://, gs://, azblob://)" $c.checkpoint -}}
{{- $storage := required "config.checkpoint.storage is required (s3://, gs://, azblob://)" $cp.storage -}}
{{- if and (gt (int .Values.replicaCount) 1) (hasPrefix "file:" $storage) -}}
{{- fail "config.checkpoint.storage is file://, which each replica would see on its own volume: use s3://, gs:// or azblob:// with more than one replica" -}}
{{- end -}}
{{- range .Values.env -}}
{{- if has .name (list "WEIR_STATE_DIR" "WEIR_HTTP_ADDRESS" "WEIR_PROCESS_REPLICA_ID") -}}
{{- fail (printf "env %s is set by the chart; remove it" .name) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c.state "dir" "/var/lib/weir" -}}
{{- $_ := set $c.http "address" (printf ":%d" (int .Values.httpPort)) -}}
{{- toYaml $c -}}
{{- end -}}

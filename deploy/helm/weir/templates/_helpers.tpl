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
{{- include "weir.kafkaSecurity" (dict "kafka" $kafka "values" .Values.kafka "env" .Values.env) -}}
{{- $_ := set $c.state "dir" "/var/lib/weir" -}}
{{- $_ := set $c.http "address" (printf ":%d" (int .Values.httpPort)) -}}
{{- toYaml $c -}}
{{- end -}}

{{/* Where the kafka-secrets volume is mounted (the Secrets of kafka.tls and
kafka.sasl, as files). Not under /etc/weir: that is the ConfigMap's volume. */}}
{{- define "weir.kafkaSecretsDir" -}}/etc/weir-kafka{{- end -}}

{{/* weir.kafkaSecurity (dict "kafka" CONFIG.KAFKA "values" .Values.kafka "env" .Values.env)
sets config.kafka.tls and config.kafka.sasl from the chart's kafka values,
pointing the *_file keys at the kafka-secrets volume. The combinations that
values.schema.json cannot express fail here, naming the keys. */}}
{{- define "weir.kafkaSecurity" -}}
{{- $k := .kafka -}}
{{- $tls := .values.tls -}}
{{- $sasl := .values.sasl -}}
{{- $dir := include "weir.kafkaSecretsDir" . -}}
{{- if and (hasKey $k "sasl") (kindIs "map" $k.sasl) -}}
{{- $inline := list -}}
{{- if $k.sasl.password -}}{{- $inline = append $inline "config.kafka.sasl.password" -}}{{- end -}}
{{- if $k.sasl.token -}}{{- $inline = append $inline "config.kafka.sasl.token" -}}{{- end -}}
{{- if and (kindIs "map" $k.sasl.oauth) $k.sasl.oauth.client_secret -}}{{- $inline = append $inline "config.kafka.sasl.oauth.client_secret" -}}{{- end -}}
{{- if $inline -}}
{{- fail (printf "%s would be stored in clear in the ConfigMap: put it in a Secret and name it in kafka.sasl.passwordSecret, tokenSecret or oauth.clientSecretSecret" (join ", " $inline)) -}}
{{- end -}}
{{- end -}}
{{- if $tls.enabled -}}
{{- if hasKey $k "tls" -}}{{- fail "config.kafka.tls is set by the chart from kafka.tls; remove it (or leave kafka.tls.enabled false)" -}}{{- end -}}
{{- $t := dict "enabled" true -}}
{{- if $tls.caSecret.name -}}{{- $_ := set $t "ca_file" (printf "%s/tls/ca.crt" $dir) -}}{{- end -}}
{{- if $tls.clientCertSecret.name -}}
{{- $_ := set $t "cert_file" (printf "%s/tls/tls.crt" $dir) -}}
{{- $_ := set $t "key_file" (printf "%s/tls/tls.key" $dir) -}}
{{- end -}}
{{- with $tls.serverName -}}{{- $_ := set $t "server_name" . -}}{{- end -}}
{{- if $tls.insecureSkipVerify -}}{{- $_ := set $t "insecure_skip_verify" true -}}{{- end -}}
{{- $_ := set $k "tls" $t -}}
{{- end -}}
{{- with $sasl.mechanism -}}
{{- if hasKey $k "sasl" -}}{{- fail "config.kafka.sasl is set by the chart from kafka.sasl; remove it (or leave kafka.sasl.mechanism empty)" -}}{{- end -}}
{{- $s := dict "mechanism" . -}}
{{- with $sasl.username -}}{{- $_ := set $s "username" . -}}{{- end -}}
{{- if $sasl.passwordSecret.name -}}{{- $_ := set $s "password_file" (printf "%s/sasl/password" $dir) -}}{{- end -}}
{{- if $sasl.tokenSecret.name -}}{{- $_ := set $s "token_file" (printf "%s/sasl/token" $dir) -}}{{- end -}}
{{- if $sasl.oauth.tokenURL -}}
{{- $o := dict "token_url" $sasl.oauth.tokenURL "client_id" $sasl.oauth.clientID "client_secret_file" (printf "%s/sasl/oauth-client-secret" $dir) -}}
{{- with $sasl.oauth.scopes -}}{{- $_ := set $o "scopes" . -}}{{- end -}}
{{- $_ := set $s "oauth" $o -}}
{{- end -}}
{{- $_ := set $k "sasl" $s -}}
{{- end -}}
{{- range .env -}}
{{- if and $tls.enabled (hasPrefix "WEIR_KAFKA_TLS_" .name) -}}
{{- fail (printf "env %s would override kafka.tls, which the chart sets; remove it" .name) -}}
{{- end -}}
{{- if and $sasl.mechanism (hasPrefix "WEIR_KAFKA_SASL_" .name) -}}
{{- fail (printf "env %s would override kafka.sasl, which the chart sets; remove it" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The sources of the kafka-secrets projected volume: one item per Secret
key the configuration names, at the path weir.kafkaSecurity points to.
Empty when no Secret is named. */}}
{{- define "weir.kafkaSecretSources" -}}
{{- $tls := .Values.kafka.tls -}}
{{- $sasl := .Values.kafka.sasl -}}
{{- if $tls.enabled -}}
{{- with $tls.caSecret.name }}
- secret:
    name: {{ . }}
    items: [{key: {{ $tls.caSecret.key | quote }}, path: tls/ca.crt}]
{{- end -}}
{{- with $tls.clientCertSecret.name }}
- secret:
    name: {{ . }}
    items:
      - {key: {{ $tls.clientCertSecret.certKey | quote }}, path: tls/tls.crt}
      - {key: {{ $tls.clientCertSecret.keyKey | quote }}, path: tls/tls.key}
{{- end -}}
{{- end -}}
{{- if $sasl.mechanism -}}
{{- with $sasl.passwordSecret.name }}
- secret:
    name: {{ . }}
    items: [{key: {{ $sasl.passwordSecret.key | quote }}, path: sasl/password}]
{{- end -}}
{{- with $sasl.tokenSecret.name }}
- secret:
    name: {{ . }}
    items: [{key: {{ $sasl.tokenSecret.key | quote }}, path: sasl/token}]
{{- end -}}
{{- if $sasl.oauth.tokenURL -}}
{{- with $sasl.oauth.clientSecretSecret.name }}
- secret:
    name: {{ . }}
    items: [{key: {{ $sasl.oauth.clientSecretSecret.key | quote }}, path: sasl/oauth-client-secret}]
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

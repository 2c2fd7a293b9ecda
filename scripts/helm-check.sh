#!/usr/bin/env bash
# Checks the Helm chart (make helm-check): helm lint, then helm template with
# the defaults and with every optional part switched on, and the rendered
# configuration file passed through `bin/processor validate`; values the
# chart owns (state.dir, http.address, process.replica_id) must be refused;
# values.schema.json must refuse misspelt keys and wrong types; the rendered
# pods must pass Pod Security "restricted" (deploy/helm/podsecurity, the
# admission controller's own evaluator), have resources and probe /livez.
# Helm is installed with `go install` into .cache/bin on first use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

HELM_VERSION=${HELM_VERSION:-v3.22.0}
HELM=.cache/bin/helm-$HELM_VERSION
CHART=deploy/helm/weir
if [[ ! -x $HELM ]]; then
	mkdir -p .cache/bin
	start=$SECONDS
	GOBIN=$PWD/.cache/bin go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	mv .cache/bin/helm "$HELM"
	echo "helm-check: installed helm $HELM_VERSION in $((SECONDS - start))s"
fi
[[ -x bin/processor ]] || make build >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

VALUES=$CHART/ci/example-values.yaml
"$HELM" lint --strict -f "$VALUES" "$CHART"

# render NAME ARGS...: renders the chart into $work/NAME.yaml.
render() {
	local name=$1
	shift
	"$HELM" template "weir-$name" "$CHART" --namespace streams -f "$VALUES" "$@" >"$work/$name.yaml"
}

# job_yaml NAME: the ConfigMap's job.yaml of a rendering, unindented.
job_yaml() {
	awk '/^kind: ConfigMap/{cm=1} cm && /^  job.yaml: \|/{on=1; next} on && /^---/{exit} on{sub(/^    /, ""); print}' "$work/$1.yaml"
}

expect() { # expect NAME PATTERN: the rendering must contain PATTERN
	grep -qE -- "$2" "$work/$1.yaml" || { echo "helm-check: $1: no match for: $2" >&2; exit 1; }
}

render defaults
render full --set persistence.enabled=false --set serviceMonitor.enabled=true \
	--set podDisruptionBudget.enabled=false --set serviceAccount.create=false \
	--set replicaCount=5 --set 'env[0].name=WEIR_LOG_LEVEL' --set 'env[0].value=debug' \
	--set 'resources.limits.memory=2Gi' --set 'affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool' \
	--set 'affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists' \
	--set 'extraVolumes[0].name=gcp-key' --set 'extraVolumes[0].secret.secretName=k' \
	--set 'extraVolumeMounts[0].name=gcp-key' --set 'extraVolumeMounts[0].mountPath=/var/secrets/google'

for r in defaults full; do
	job_yaml "$r" >"$work/$r-job.yaml"
	# The rendered file is what the container runs: it must validate, with
	# the replica ID the pod's environment gives.
	env -i PATH="$PATH" HOME="$HOME" WEIR_PROCESS_REPLICA_ID=weir-0 bin/processor validate -c "$work/$r-job.yaml" >/dev/null ||
		{ echo "helm-check: $r: the rendered job.yaml does not validate:" >&2; cat "$work/$r-job.yaml" >&2; exit 1; }
	grep -q '^  dir: /var/lib/weir$' "$work/$r-job.yaml" || { echo "helm-check: $r: state.dir is not the volume" >&2; exit 1; }
	grep -q "^  address: ':9464'$\|^  address: \":9464\"$\|^  address: :9464$" "$work/$r-job.yaml" || { echo "helm-check: $r: http.address is not :9464" >&2; cat "$work/$r-job.yaml" >&2; exit 1; }
done

expect defaults '^kind: StatefulSet'
expect defaults 'replicas: 3'
expect defaults 'fieldPath: metadata.name'
expect defaults 'path: /readyz'
expect defaults 'path: /livez'
# Requests and a memory limit by default.
awk '/^ *resources:$/{r=1; next} r' "$work/defaults.yaml" | head -8 >"$work/resources"
for want in 'limits:' 'memory: 2Gi' 'requests:' 'cpu: 500m' 'memory: 1Gi'; do
	grep -q "$want" "$work/resources" || { echo "helm-check: defaults: resources lack $want" >&2; cat "$work/resources" >&2; exit 1; }
done
expect defaults 'volumeClaimTemplates:'
expect defaults '^kind: PodDisruptionBudget'
expect defaults '^kind: ServiceAccount'
expect defaults 'checksum/config: [0-9a-f]{64}'
expect defaults 'podAntiAffinity:'
expect full 'replicas: 5'
expect full '^kind: ServiceMonitor'
expect full 'emptyDir: \{\}'
expect full 'name: WEIR_LOG_LEVEL'
expect full 'memory: 2Gi'
expect full 'nodeAffinity:'
expect full 'mountPath: /var/secrets/google'
if grep -qE '^kind: (PodDisruptionBudget|ServiceAccount)' "$work/full.yaml"; then
	echo "helm-check: full: disabled parts were rendered" >&2
	exit 1
fi
if grep -q 'volumeClaimTemplates:' "$work/full.yaml"; then
	echo "helm-check: full: persistence.enabled=false still claims volumes" >&2
	exit 1
fi

# Cross-references inside each rendering: the StatefulSet's serviceName is
# the headless Service; every volumeMount has a volume or a claim template;
# the state volume is mounted where state.dir points.
for r in defaults full; do
	f=$work/$r.yaml
	svc=$(awk '/^kind: Service$/{s=1} s && /^  name: /{print $2; exit}' "$f")
	grep -q "^  serviceName: $svc\$" "$f" || { echo "helm-check: $r: serviceName is not the headless Service $svc" >&2; exit 1; }
	mounts=$(awk '/^ *volumeMounts:/{m=1; next} m && /^ *- name: /{print $3; next} m && !/^ *(mountPath|readOnly|subPath):/{m=0}' "$f" | sort -u)
	vols=$(awk '/^ *volumes:$/{v=1; next} v && /^        - name: /{print $3; next} v && /^      [a-z]/{v=0} /^  volumeClaimTemplates:/{c=1; next} c && /^        name: /{print $2}' "$f" | sort -u)
	for m in $mounts; do
		grep -qx "$m" <<<"$vols" || { echo "helm-check: $r: volumeMount $m has no volume or claim template (have: $vols)" >&2; exit 1; }
	done
	grep -q 'mountPath: /var/lib/weir$' "$f" || { echo "helm-check: $r: the state volume is not at state.dir" >&2; exit 1; }
done

# Pod Security "restricted" (runAsNonRoot, allowPrivilegeEscalation false,
# capabilities drop ALL, seccompProfile RuntimeDefault, volume types...),
# checked by the evaluator the admission controller runs.
(cd deploy/helm/podsecurity && go build -o "$work/podsecurity" .)
"$work/podsecurity" -level restricted "$work/defaults.yaml" "$work/full.yaml"
# ...and it does refuse a pod that lacks one of them.
if "$HELM" template weir "$CHART" -f "$VALUES" --set podSecurityContext.seccompProfile=null \
	--set securityContext.seccompProfile=null >"$work/noseccomp.yaml" &&
	"$work/podsecurity" -level restricted "$work/noseccomp.yaml" >"$work/noseccomp.out"; then
	echo "helm-check: a pod without seccompProfile passed the restricted check" >&2
	exit 1
fi
grep -q seccompProfile "$work/noseccomp.out" || { echo "helm-check: restricted check: $(cat "$work/noseccomp.out")" >&2; exit 1; }

# values.schema.json: a misspelt key anywhere (top level, the chart's own
# values, the processor's configuration down to a pipeline step) or a
# wrong type fails lint and template, naming the key.
schema_refuses() { # schema_refuses KEY YAML: lint and template must fail, naming KEY
	printf '%s\n' "$2" >"$work/bad-values.yaml"
	local out
	if out=$("$HELM" lint --strict -f "$VALUES" -f "$work/bad-values.yaml" "$CHART" 2>&1); then
		echo "helm-check: helm lint accepted: $2" >&2
		exit 1
	fi
	grep -q -- "$1" <<<"$out" || { echo "helm-check: lint error does not name $1: $out" >&2; exit 1; }
	if out=$("$HELM" template weir "$CHART" -f "$VALUES" -f "$work/bad-values.yaml" 2>&1); then
		echo "helm-check: helm template accepted: $2" >&2
		exit 1
	fi
	grep -q "schema" <<<"$out" && grep -q -- "$1" <<<"$out" || { echo "helm-check: template error is not the schema's, naming $1: $out" >&2; exit 1; }
}
schema_refuses intervall 'config: {checkpoint: {intervall: 10s}}'
schema_refuses replicaCont 'replicaCont: 2'
schema_refuses sesion_timeout 'config: {kafka: {sesion_timeout: 10s}}'
schema_refuses topik 'config: {job: {pipeline: [{source: {topics: [clicks]}}, {sink: {topik: out}}]}}'
schema_refuses /config/checkpoint/interval 'config: {checkpoint: {interval: 2}}'
schema_refuses /config/kafka/brokers 'config: {kafka: {brokers: "kafka:9092"}}'
schema_refuses delivery 'config: {job: {pipeline: [{source: {topics: [clicks]}}, {sink: {topic: out, delivery: exactly-onse}}]}}'
schema_refuses enabeld 'persistence: {enabeld: false}'

# Without a job, a brokers list or storage, the chart refuses to render.
if out=$("$HELM" template weir "$CHART" 2>&1); then
	echo "helm-check: the chart rendered without config.job" >&2
	exit 1
fi
grep -q "config.job is required" <<<"$out" || { echo "helm-check: no required-key error: $out" >&2; exit 1; }
# file:// storage: refused with several replicas, accepted with one.
if "$HELM" template weir "$CHART" -f "$VALUES" --set config.checkpoint.storage=file:///x >/dev/null 2>&1; then
	echo "helm-check: file:// storage accepted with 3 replicas" >&2
	exit 1
fi
"$HELM" template weir "$CHART" -f "$VALUES" --set config.checkpoint.storage=file:///x --set replicaCount=1 >/dev/null
# Environment variables that would override what the chart owns.
if "$HELM" template weir "$CHART" -f "$VALUES" --set 'env[0].name=WEIR_STATE_DIR' --set 'env[0].value=/tmp' >/dev/null 2>&1; then
	echo "helm-check: env WEIR_STATE_DIR accepted" >&2
	exit 1
fi

# Keys the chart owns are refused, naming the key.
for kv in config.state.dir=/tmp config.http.address=:1 config.process.replica_id=x; do
	if out=$("$HELM" template weir "$CHART" -f "$VALUES" --set "$kv" 2>&1); then
		echo "helm-check: --set $kv was accepted" >&2
		exit 1
	fi
	grep -q "${kv%%=*}" <<<"$out" || { echo "helm-check: --set $kv: error does not name the key: $out" >&2; exit 1; }
done

echo "helm-check: chart $(awk '/^version:/{print $2}' $CHART/Chart.yaml) ok"

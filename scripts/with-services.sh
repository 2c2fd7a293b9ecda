#!/usr/bin/env bash
# Runs a command with the real Kafka broker, the real S3 server, the gs://
# and azblob:// emulators and the real schema registry up: starts whichever
# of them is not running, exports their addresses (WEIR_KAFKA_BROKERS,
# WEIR_S3_ENDPOINT, STORAGE_EMULATOR_HOST, WEIR_REGISTRY_URL, ...), runs the
# command, and stops what it started, whatever the command's outcome.
# WEIR_SERVICES limits which (default "kafka s3 cloud registry").
#
#   scripts/with-services.sh go test ./...
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
started=()

cleanup() {
	local rc=$?
	for svc in "${started[@]}"; do
		bash "$root/scripts/$svc.sh" down || true
	done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The services that are not running start at once, in parallel: on a fresh
# machine their installs (Kafka's jars, versitygw, fake-gcs-server,
# Azurite's npm package) took two minutes one after the other.
pids=()
starting=()
for svc in ${WEIR_SERVICES:-kafka s3 cloud registry}; do
	if ! bash "$root/scripts/$svc.sh" status >/dev/null 2>&1; then
		bash "$root/scripts/$svc.sh" up &
		pids+=("$!")
		starting+=("$svc")
	fi
done
failed=()
for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then
		started+=("${starting[$i]}")
	else
		failed+=("${starting[$i]}")
	fi
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "with-services.sh: could not start: ${failed[*]} (see above)" >&2
	exit 1 # cleanup stops the ones that started
fi
for svc in ${WEIR_SERVICES:-kafka s3 cloud registry}; do
	eval "$(bash "$root/scripts/$svc.sh" env)"
done

"$@"

#!/usr/bin/env bash
# Emulators of the two other object stores Weir supports, for its tests:
# fake-gcs-server (gs://, `go install` at a pinned version) and Azurite's
# blob service (azblob://, npm at a pinned version), on loopback, under
# .cache/cloud/<port> (git-ignored). Needs Go and Node.js with npm.
#
#   scripts/cloud.sh up       install (first time only), start both, wait until they answer
#   scripts/cloud.sh down     stop both; no-op for what is not running
#   scripts/cloud.sh status   exit 0 iff both run
#   scripts/cloud.sh env      print the export lines tests read (eval "$(scripts/cloud.sh env)")
#
# Settings (environment): WEIR_GCS_PORT (19100), WEIR_AZURITE_PORT (19110),
# WEIR_CLOUD_DIR (.cache/cloud), WEIR_CLOUD_WAIT (seconds, 60).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
gcs_module=github.com/fsouza/fake-gcs-server
gcs_version=v1.56.1
azurite_version=3.37.0

gcs_port=${WEIR_GCS_PORT:-19100}
az_port=${WEIR_AZURITE_PORT:-19110}
check_port cloud.sh "$gcs_port"
check_port cloud.sh "$az_port"
base=${WEIR_CLOUD_DIR:-$root/.cache/cloud}
wait_s=${WEIR_CLOUD_WAIT:-60}
bindir=$root/.cache/bin
gcs_bin=$bindir/fake-gcs-server
az_prefix=$root/.cache/azurite-$azurite_version
az_main=$az_prefix/node_modules/azurite/dist/src/blob/main.js
gcs_dir=$base/gcs-$gcs_port
az_dir=$base/azurite-$az_port
bucket=weir-test
# Azurite's well-known development account (public, documented by Microsoft).
az_account=devstoreaccount1
az_key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

log() { printf 'cloud.sh: %s\n' "$*" >&2; }

install() {
	if [ ! -x "$gcs_bin" ] || [ "$(go version -m "$gcs_bin" 2>/dev/null | awk -v m=$gcs_module '$1 == "mod" && $2 == m {print $3}')" != "$gcs_version" ]; then
		local start=$SECONDS
		mkdir -p "$bindir"
		GOBIN="$bindir" go install "$gcs_module@$gcs_version"
		log "installed fake-gcs-server $gcs_version in $((SECONDS - start))s"
	fi
	if [ ! -f "$az_main" ]; then
		if ! command -v npm >/dev/null 2>&1; then
			log "npm not found: Azurite is installed from the npm registry"
			exit 1
		fi
		local start=$SECONDS
		mkdir -p "$az_prefix"
		npm install --prefix "$az_prefix" --no-audit --no-fund --loglevel=error "azurite@$azurite_version" >/dev/null
		log "installed azurite $azurite_version in $((SECONDS - start))s"
	fi
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start NAME DIR PORT CMD...: start CMD in the background unless running.
start() {
	local name=$1 dir=$2 port=$3
	shift 3
	if alive "$dir/pid" && port_open "$port"; then
		return 0
	fi
	if alive "$dir/pid"; then # alive but not listening: replace it
		stop_pid "$dir/pid" cloud.sh 3
	fi
	if port_open "$port"; then
		log "port $port is taken by another process; set WEIR_GCS_PORT / WEIR_AZURITE_PORT"
		down
		exit 1
	fi
	mkdir -p "$dir"
	nohup "$@" >"$dir/log" 2>&1 </dev/null &
	echo $! >"$dir/pid"
	local deadline=$((SECONDS + wait_s))
	until port_open "$port"; do
		if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
			log "$name exited during startup; last lines of $dir/log:"
			tail -n 20 "$dir/log" >&2 || true
			down
			exit 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "$name did not listen on 127.0.0.1:$port within ${wait_s}s"
			down
			exit 1
		fi
		sleep 0.2
	done
	log "$name up (pid $(cat "$dir/pid")) on 127.0.0.1:$port"
}

up() {
	# A failure leaves nothing running: the caller records the service as
	# started only when up succeeds.
	trap 'down' ERR
	install
	# The bucket exists from the start: a directory under -data.
	mkdir -p "$gcs_dir/data/$bucket"
	start fake-gcs-server "$gcs_dir" "$gcs_port" "$gcs_bin" -scheme http -host 127.0.0.1 -port "$gcs_port" \
		-public-host "127.0.0.1:$gcs_port" -external-url "http://127.0.0.1:$gcs_port" \
		-backend filesystem -filesystem-root "$gcs_dir/storage" -data "$gcs_dir/data" -log-level warn
	start azurite "$az_dir" "$az_port" node "$az_main" --blobHost 127.0.0.1 --blobPort "$az_port" \
		--location "$az_dir/data" --skipApiVersionCheck --loose --silent
}

down() {
	local d
	for d in "$gcs_dir" "$az_dir"; do
		if alive "$d/pid"; then
			stop_pid "$d/pid" cloud.sh 3
			log "stopped $(basename "$d")"
		fi
		rm -f "$d/pid"
	done
}

status() {
	alive "$gcs_dir/pid" && port_open "$gcs_port" && alive "$az_dir/pid" && port_open "$az_port"
}

# The container of azblob:// is created by the tests (internal/cloudtest).
env_lines() {
	printf 'export %s=%q\n' \
		STORAGE_EMULATOR_HOST "127.0.0.1:$gcs_port" \
		WEIR_GCS_URL "gs://$bucket" \
		WEIR_GCS_SERVER "fake-gcs-server@$gcs_version" \
		AZURE_STORAGE_ACCOUNT "$az_account" \
		AZURE_STORAGE_KEY "$az_key" \
		WEIR_AZBLOB_URL "azblob://$bucket?protocol=http&domain=127.0.0.1:$az_port" \
		WEIR_AZBLOB_SERVER "azurite@$azurite_version"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
env) env_lines ;;
install) install ;;
*)
	echo "usage: $0 up|down|status|env|install" >&2
	exit 2
	;;
esac

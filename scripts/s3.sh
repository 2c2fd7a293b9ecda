#!/usr/bin/env bash
# A real S3-compatible server for Weir's tests: versitygw (the Versity S3
# gateway) with its posix backend, on loopback, storing objects as files under
# .cache/s3/data (git-ignored). `go install` builds it from the Go module proxy
# at a pinned version into .cache/bin the first time; needs only Go.
#
#   scripts/s3.sh up       install (first time only), start, wait until it answers, create the bucket
#   scripts/s3.sh down     stop cleanly (SIGTERM, then SIGKILL after a grace period); no-op if not running
#   scripts/s3.sh status   exit 0 iff the server is running
#   scripts/s3.sh env      print the export lines tests read (eval "$(scripts/s3.sh env)")
#   scripts/s3.sh install  only install the binary
#
# Settings (environment): WEIR_S3_PORT (default 19000), WEIR_S3_BUCKET
# (weir-test), WEIR_S3_ACCESS_KEY (weirtest), WEIR_S3_SECRET_KEY
# (weirtestsecret), WEIR_S3_REGION (us-east-1), WEIR_S3_DIR (.cache/s3/<port>: pid
# file, log, and data/), WEIR_S3_BIN (.cache/bin), WEIR_S3_WAIT (seconds to
# wait for the server to answer, 60). Objects survive down/up; delete
# $WEIR_S3_DIR/data to start empty.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
# Pinned: bump deliberately, and re-run the smoke tests in internal/s3test.
module=github.com/versity/versitygw
version=v1.8.0
server="versitygw@$version"

port=${WEIR_S3_PORT:-19000}
check_port s3.sh "$port"
bucket=${WEIR_S3_BUCKET:-weir-test}
access=${WEIR_S3_ACCESS_KEY:-weirtest}
secret=${WEIR_S3_SECRET_KEY:-weirtestsecret}
region=${WEIR_S3_REGION:-us-east-1}
dir=${WEIR_S3_DIR:-$root/.cache/s3/$port}
bindir=${WEIR_S3_BIN:-$root/.cache/bin}
wait_s=${WEIR_S3_WAIT:-60}

bin="$bindir/versitygw"
pidfile="$dir/versitygw.pid"
logfile="$dir/versitygw.log"
data="$dir/data"
endpoint="http://127.0.0.1:$port"

log() { printf 's3.sh: %s\n' "$*" >&2; }

# installed_version prints the module version the binary was built from.
installed_version() {
	go version -m "$bin" 2>/dev/null | awk -v m="$module" '$1 == "mod" && $2 == m {print $3}'
}

install_bin() {
	if ! command -v go >/dev/null 2>&1; then
		log "go not found: versitygw is built with 'go install' (Go 1.26)"
		exit 1
	fi
	if [ -x "$bin" ] && [ "$(installed_version)" = "$version" ]; then
		return 0
	fi
	log "installing $module/cmd/versitygw@$version into $bindir (first time only; takes a few minutes)"
	local start=$SECONDS
	mkdir -p "$bindir"
	# pkg@version builds in module mode outside Weir's go.mod, at exactly that version.
	GOBIN="$bindir" go install "$module/cmd/versitygw@$version"
	log "installed in $((SECONDS - start))s"
}

# pid_alive succeeds when the pid file names a live versitygw process (not a
# recycled pid).
pid_alive() {
	local pid
	[ -f "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	kill -0 "$pid" 2>/dev/null || return 1
	[ ! -r "/proc/$pid/comm" ] || [ "$(cat "/proc/$pid/comm")" = versitygw ]
}

# port_open succeeds when something accepts TCP connections on the port.
port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

# ensure_bucket waits until the server answers S3 requests and creates the
# bucket unless it exists.
ensure_bucket() {
	(cd "$root" && go run ./internal/s3test/cmd/s3bucket \
		-endpoint "$endpoint" -bucket "$bucket" -region "$region" \
		-access "$access" -secret "$secret" -timeout "${1:-30s}")
}

fail_start() {
	log "$1"
	if [ -f "$logfile" ]; then
		log "last lines of $logfile:"
		tail -n 20 "$logfile" >&2 || true
	fi
	down
	exit 1
}

up() {
	install_bin
	if pid_alive; then
		if ensure_bucket 10s; then
			log "already running (pid $(cat "$pidfile")) at $endpoint, bucket $bucket"
			return 0
		fi
		log "pid $(cat "$pidfile") is alive but does not answer; restarting it"
		down
	elif port_open; then
		log "port $port is taken by another process (not started by this script); set WEIR_S3_PORT"
		exit 1
	fi
	mkdir -p "$data"
	local start=$SECONDS
	# Credentials and region go through the environment, not argv, so they do
	# not show in ps. --port binds loopback only.
	ROOT_ACCESS_KEY_ID="$access" ROOT_SECRET_ACCESS_KEY="$secret" VGW_REGION="$region" \
		nohup "$bin" --port "127.0.0.1:$port" posix "$data" >"$logfile" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$pidfile"
	local deadline=$((SECONDS + wait_s))
	until port_open; do
		# kill -0, not pid_alive: until nohup execs, the process is not yet named versitygw.
		if ! kill -0 "$pid" 2>/dev/null; then
			fail_start "versitygw exited during startup"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			fail_start "versitygw did not listen on 127.0.0.1:$port within ${wait_s}s"
		fi
		sleep 0.2
	done
	# The first run compiles the bucket tool; give it the same bound again.
	if ! ensure_bucket "${wait_s}s"; then
		fail_start "versitygw listens but bucket $bucket could not be created"
	fi
	log "$server up (pid $(cat "$pidfile")) at $endpoint, bucket $bucket, in $((SECONDS - start))s"
}

down() {
	if ! pid_alive; then
		rm -f "$pidfile"
		return 0
	fi
	local pid
	pid=$(cat "$pidfile")
	stop_pid "$pidfile" s3.sh 10
	log "stopped (pid $pid)"
}

status() {
	if pid_alive && port_open; then
		log "running (pid $(cat "$pidfile")) at $endpoint"
		return 0
	fi
	log "not running"
	return 1
}

# env_lines prints what tests read. The AWS_* pair is for the AWS SDK behind
# gocloud.dev/blob/s3blob, which takes credentials only from its environment;
# the default values contain no spaces, so even an unquoted $(...) eval works.
env_lines() {
	printf 'export %s=%q\n' \
		WEIR_S3_ENDPOINT "$endpoint" \
		WEIR_S3_BUCKET "$bucket" \
		WEIR_S3_ACCESS_KEY "$access" \
		WEIR_S3_SECRET_KEY "$secret" \
		WEIR_S3_REGION "$region" \
		WEIR_S3_SERVER "$server" \
		AWS_ACCESS_KEY_ID "$access" \
		AWS_SECRET_ACCESS_KEY "$secret"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
env) env_lines ;;
install) install_bin ;;
*)
	echo "usage: $0 up|down|status|env|install" >&2
	exit 2
	;;
esac

#!/usr/bin/env bash
# A real Confluent-compatible schema registry for Weir's tests: Apicurio
# Registry 3 with its default storage (SQL on an in-memory H2 database), on
# loopback, serving the Confluent Schema Registry API ("ccompat") under
# /apis/ccompat/v7. Maven fetches the registry's own distribution, a built
# Quarkus fast-jar (io.apicurio:apicurio-registry-app:<version>:tar.gz:all),
# from Maven Central into .cache/registry (git-ignored), through
# scripts/registry/pom.xml: nothing is built.
# Needs Maven and Java 21 or newer (the registry's classes are Java 21; this
# script finds a JDK under /usr/lib/jvm when the default java is older).
#
#   scripts/registry.sh up       install (first time only), start, wait until the ccompat API answers
#   scripts/registry.sh down     stop cleanly (SIGTERM, then SIGKILL after a grace period); no-op if not running
#   scripts/registry.sh status   exit 0 iff the registry is running and answers
#   scripts/registry.sh env      print the export lines tests read (eval "$(scripts/registry.sh env)")
#   scripts/registry.sh install  only install the distribution
#
# Ports, on 127.0.0.1 (port = WEIR_REGISTRY_PORT):
#   port      the REST APIs: Confluent-compatible /apis/ccompat/v7 (and v8), Apicurio's /apis/registry/v3
#   port+1    Quarkus's management interface: /health/ready, /metrics
#
# Every `up` starts with an empty registry (the database is in memory), and
# `down` forgets every schema. Apicurio's defaults stand: the global
# compatibility is NONE (Confluent's is BACKWARD); no authentication.
#
# Settings (environment): WEIR_REGISTRY_PORT (default 19120),
# WEIR_REGISTRY_VERSION (3.3.3; the layout is that of Apicurio 3),
# WEIR_REGISTRY_JAVA (the java to run it with; default: the first of
# $JAVA_HOME/bin/java, java on PATH and /usr/lib/jvm/*/bin/java that is 21 or
# newer), WEIR_REGISTRY_HEAP (512m), WEIR_REGISTRY_JAVA_OPTS (more java
# options, split on spaces, after this script's own: Apicurio's settings as
# -D properties, such as -Dapicurio.ccompat.legacy-id-mode.enabled=true),
# WEIR_REGISTRY_WAIT (seconds to wait for the API to answer, 90).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
version=${WEIR_REGISTRY_VERSION:-3.3.3}
port=${WEIR_REGISTRY_PORT:-19120}
check_port registry.sh "$port"
mport=$((port + 1))
check_port registry.sh "$mport"
heap=${WEIR_REGISTRY_HEAP:-512m}
wait_s=${WEIR_REGISTRY_WAIT:-90}
artifact="io.apicurio:apicurio-registry-app:$version:tar.gz:all"

cache="$root/.cache"
m2="$cache/registry/m2"
app="$cache/registry/$version"
tarball="$m2/io/apicurio/apicurio-registry-app/$version/apicurio-registry-app-$version-all.tar.gz"
run="$cache/registry-run/$port"
pidfile="$run/registry.pid"
logfile="$run/registry.log"
url="http://127.0.0.1:$port/apis/ccompat/v7"

log() { printf 'registry.sh: %s\n' "$*" >&2; }

# java_major JAVA prints the feature version of that java (17, 21, 25, ...).
java_major() {
	local v
	v=$("$1" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
	v=${v#1.} # 1.8.0 -> 8
	printf '%s\n' "${v%%[.+-]*}"
}

# find_java sets java to a java of 21 or newer, or fails.
find_java() {
	local c m
	if [ -n "${WEIR_REGISTRY_JAVA:-}" ]; then
		java=$WEIR_REGISTRY_JAVA
		m=$(java_major "$java" 2>/dev/null || true)
		if ! [ "${m:-0}" -ge 21 ] 2>/dev/null; then
			log "WEIR_REGISTRY_JAVA=$java is not a java of 21 or newer (Apicurio Registry $version needs 21+)"
			exit 1
		fi
		return 0
	fi
	local candidates=()
	[ -n "${JAVA_HOME:-}" ] && candidates+=("$JAVA_HOME/bin/java")
	command -v java >/dev/null 2>&1 && candidates+=("$(command -v java)")
	# Each is asked its version: the first of 21 or newer wins (here
	# /usr/lib/jvm/temurin-25-jdk-amd64, beside Debian's Java 17).
	local jvms
	mapfile -t jvms < <(printf '%s\n' /usr/lib/jvm/*/bin/java | sort -rV)
	candidates+=("${jvms[@]}")
	for c in "${candidates[@]}"; do
		[ -x "$c" ] || continue
		m=$(java_major "$c" 2>/dev/null || true)
		if [ "${m:-0}" -ge 21 ] 2>/dev/null; then
			java=$c
			return 0
		fi
	done
	log "no java of 21 or newer found (Apicurio Registry $version is built for Java 21; Java 17 fails with UnsupportedClassVersionError): tried ${candidates[*]:-nothing}; set WEIR_REGISTRY_JAVA"
	exit 1
}

install_app() {
	if [ -f "$app/.complete" ] && [ -f "$app/quarkus-run.jar" ]; then
		return 0
	fi
	if ! command -v mvn >/dev/null 2>&1; then
		log "mvn not found: Maven fetches Apicurio Registry from Maven Central (apt-get install maven)"
		exit 1
	fi
	log "fetching Apicurio Registry $version ($artifact, ~160 MB) from Maven Central into $app"
	local start=$SECONDS
	rm -rf "$app"
	mkdir -p "$app"
	# scripts/registry/pom.xml says why antrun: it only makes Maven download
	# the tarball. -q still prints errors (and some escape codes): shown on
	# a failure only.
	if ! mvn -B -q -f "$root/scripts/registry/pom.xml" \
		-Dmaven.repo.local="$m2" -Dregistry.version="$version" \
		org.apache.maven.plugins:maven-antrun-plugin:run >"$cache/registry/mvn.log" 2>&1; then
		log "mvn could not fetch $artifact:"
		cat "$cache/registry/mvn.log" >&2
		exit 1
	fi
	if ! tar -xzf "$tarball" -C "$app" --no-same-owner || [ ! -f "$app/quarkus-run.jar" ]; then
		log "$tarball did not unpack to a quarkus-run.jar: not an Apicurio Registry 3 distribution?"
		exit 1
	fi
	# Unpacked: the tarball would only take another 160 MB of disk.
	rm -f "$tarball"
	touch "$app/.complete"
	log "fetched and unpacked in $((SECONDS - start))s"
}

# pid_alive succeeds when the pid file names a live registry of this
# install (not a recycled pid).
pid_alive() {
	local pid
	[ -f "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	kill -0 "$pid" 2>/dev/null || return 1
	[ ! -r "/proc/$pid/cmdline" ] || tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$app/quarkus-run.jar"
}

# port_open PORT succeeds when something accepts TCP connections on it.
port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# answers succeeds when the ccompat API lists subjects (HTTP 200).
answers() {
	[ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$url/subjects" 2>/dev/null)" = 200 ]
}

fail_start() {
	log "$1"
	if [ -f "$logfile" ]; then
		log "last lines of $logfile (without stack frames):"
		grep -v $'^\tat ' "$logfile" | tail -n 30 >&2 || true
	fi
	down
	exit 1
}

up() {
	if ! command -v curl >/dev/null 2>&1; then
		log "curl not found: it asks the registry whether it answers (apt-get install curl)"
		exit 1
	fi
	find_java
	install_app
	if pid_alive; then
		if answers; then
			log "already running (pid $(cat "$pidfile")) at $url"
			return 0
		fi
		log "pid $(cat "$pidfile") is alive but does not answer; restarting it"
		down
	fi
	local p
	for p in "$port" "$mport"; do
		if port_open "$p"; then
			log "port $p is taken by another process (not started by this script); set WEIR_REGISTRY_PORT"
			exit 1
		fi
	done
	mkdir -p "$run"
	# C1 only and the serial collector: a registry for tests starts ~2s
	# sooner on two cores, and needs no peak throughput.
	# No class-data archive (-XX:+AutoCreateSharedArchive): it made warm
	# starts 2s faster, but Temurin 25.0.3 crashed (SIGSEGV in
	# LambdaProxyClassDictionary::find_lambda_proxy_class) in 2 of ~8 starts
	# that wrote it, and writing it added 6-10s to `down`.
	local opts=("-Xmx$heap" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
		"-XX:ErrorFile=$run/hs_err_pid%p.log")
	# Quarkus reads -D properties at run time. Loopback only; the management
	# interface (health, metrics) would otherwise take 0.0.0.0:9000. The
	# storage is Apicurio's default, spelt out.
	opts+=(-Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$port"
		-Dquarkus.management.host=127.0.0.1 "-Dquarkus.management.port=$mport"
		-Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2)
	# Last, so that they can override any of the above.
	# shellcheck disable=SC2206 # WEIR_REGISTRY_JAVA_OPTS is a list of words
	opts+=(${WEIR_REGISTRY_JAVA_OPTS:-})
	local start=$SECONDS
	: >"$logfile"
	# setsid: the registry outlives this shell and is not hit by the caller's ^C.
	setsid nohup "$java" "${opts[@]}" -jar "$app/quarkus-run.jar" >>"$logfile" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$pidfile"
	local deadline=$((SECONDS + wait_s))
	until answers; do
		if ! kill -0 "$pid" 2>/dev/null; then
			fail_start "the registry exited during startup"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			fail_start "the registry did not answer GET $url/subjects within ${wait_s}s"
		fi
		sleep 0.2
	done
	log "Apicurio Registry $version up (pid $pid, Java $(java_major "$java")) at $url in $((SECONDS - start))s"
}

down() {
	if ! pid_alive; then
		rm -f "$pidfile"
		return 0
	fi
	local pid
	pid=$(cat "$pidfile")
	stop_pid "$pidfile" registry.sh 20
	log "stopped (pid $pid)"
}

status() {
	if pid_alive && answers; then
		log "running (pid $(cat "$pidfile")) at $url"
		return 0
	fi
	log "not running"
	return 1
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
install) install_app ;;
env)
	printf 'export WEIR_REGISTRY_URL=%s\n' "$url"
	printf 'export WEIR_REGISTRY_VERSION=%s\n' "$version"
	;;
*)
	echo "usage: $0 up|down|status|env|install" >&2
	exit 2
	;;
esac

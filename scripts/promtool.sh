#!/usr/bin/env bash
# Prometheus's promtool, for checking and unit-testing the chart's alerting
# rules (make helm-check) and evaluating them against a failed job's
# /metrics (make test). It comes from Debian's prometheus package, the
# registry this machine and CI reach: the .deb is fetched with
# `apt-get download` (verified by apt against the signed archive), and only
# usr/bin/promtool is extracted into a cache outside the clone (WEIR_CACHE,
# default ~/.cache/weir); nothing is installed system-wide, no service runs.
#
#   scripts/promtool.sh path   prints the binary's path, installing it first
#   scripts/promtool.sh env    prints `export WEIR_PROMTOOL=<path>`
set -euo pipefail

CACHE_DIR=${WEIR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weir}
BIN=$CACHE_DIR/bin/promtool

log() { printf 'promtool.sh: %s\n' "$*" >&2; }

install_promtool() {
	command -v apt-get >/dev/null || { log "apt-get not found: promtool comes from Debian's prometheus package"; exit 1; }
	local tmp start=$SECONDS
	tmp=$(mktemp -d)
	# apt drops privileges to _apt for downloads; a directory it may write.
	chmod 0777 "$tmp"
	if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
		# A fresh machine may have no package lists yet.
		local sudo=
		[ "$(id -u)" = 0 ] || sudo=sudo
		$sudo apt-get update -qq >/dev/null
		(cd "$tmp" && apt-get download -qq prometheus >/dev/null)
	fi
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	mkdir -p "$(dirname "$BIN")"
	mv "$tmp/x/usr/bin/promtool" "$BIN.tmp.$$"
	mv "$BIN.tmp.$$" "$BIN"
	rm -rf "$tmp"
	log "installed $("$BIN" --version 2>&1 | sed -n 1p) into $BIN in $((SECONDS - start))s"
}

[ -x "$BIN" ] || install_promtool
case ${1:-path} in
path) echo "$BIN" ;;
env) echo "export WEIR_PROMTOOL=$BIN" ;;
*) log "usage: promtool.sh [path|env]"; exit 2 ;;
esac

# Shell functions shared by scripts/kafka.sh and scripts/s3.sh. Source it.

# stop_pid PIDFILE NAME SECONDS: SIGTERM the process in PIDFILE, wait up to
# SECONDS for it to exit, then SIGKILL it; remove PIDFILE.
stop_pid() {
	local pidfile=$1 name=$2 grace=$3 pid i
	pid=$(cat "$pidfile")
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 $((grace * 10))); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		printf '%s: pid %s did not stop within %ss of SIGTERM; sending SIGKILL\n' "$name" "$pid" "$grace" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
}

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

# check_port NAME PORT: refuse a listening port in Linux's ephemeral range
# (net.ipv4.ip_local_port_range, 32768-60999 by default). A service there can
# lose its port to any client's outgoing connection: a CI run failed when
# fake-gcs-server could not bind 39100 ("address already in use").
check_port() {
	local name=$1 port=$2 lo hi
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768; hi=60999; }
	if ! [[ $port =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
		printf '%s: port %q is not a port number\n' "$name" "$port" >&2
		return 1
	fi
	if [ "$port" -ge "$lo" ] && [ "$port" -le "$hi" ]; then
		printf '%s: port %s is in the ephemeral range %s-%s, where an outgoing connection can take it first; choose one below %s\n' \
			"$name" "$port" "$lo" "$hi" "$lo" >&2
		return 1
	fi
}

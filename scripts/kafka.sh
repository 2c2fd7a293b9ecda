#!/usr/bin/env bash
# A real Apache Kafka broker for Weir's tests: a single KRaft node (combined
# broker and controller) on loopback, run from jars that Maven fetches from
# Maven Central into .cache/ (git-ignored). Needs Java 17+ and Maven.
#
#   scripts/kafka.sh up       fetch (first time only), format, start, wait until it answers
#   scripts/kafka.sh down     stop cleanly (SIGTERM, then SIGKILL after a grace period)
#   scripts/kafka.sh status   exit 0 iff the broker is running and answers
#   scripts/kafka.sh env      print the export lines tests read
#   scripts/kafka.sh fetch    only fetch the jars
#
# Listeners, on 127.0.0.1 (port = WEIR_KAFKA_PORT):
#   port      PLAINTEXT (inter-broker, and most tests)
#   port+1    CONTROLLER
#   port+2    SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (unsecured JWT)
#   port+3    SSL with ssl.client.auth=required (mutual TLS)
# Certificates (a CA, the broker's, a client's) are made at `up` in
# .cache/kafka-run/<port>/tls by internal/kafkatest/cmd/kafkacerts; the users
# are those of internal/kafkatest/secure.go. No authorizer.
#
# Settings (environment): WEIR_KAFKA_VERSION (default 4.4.0), WEIR_KAFKA_PORT
# (19092), WEIR_KAFKA_HEAP (1g), WEIR_KAFKA_KEEP_DATA=1 to keep the log
# directory (and the certificates) across restarts.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
version=${WEIR_KAFKA_VERSION:-4.4.0}
port=${WEIR_KAFKA_PORT:-19092}
cport=$((port + 1))
sport=$((port + 2))
mport=$((port + 3))
for p in "$port" "$cport" "$sport" "$mport"; do
	check_port kafka.sh "$p"
done
heap=${WEIR_KAFKA_HEAP:-1g}
cache="$root/.cache"
libs="$cache/kafka/$version/libs"
run="$cache/kafka-run/$port"
pidfile="$run/kafka.pid"
logfile="$run/kafka.log"
tls="$run/tls"
brokers="127.0.0.1:$port"
sasl_ssl="127.0.0.1:$sport"
mtls="127.0.0.1:$mport"

# The users of the secured listeners; internal/kafkatest/secure.go has the
# same names and passwords.
scram_users=(weir=weir-scram-7f3a9c verifier=verifier-scram-52be1d)
plain_users=(weir=weir-plain-4c81e0 verifier=verifier-plain-9d27aa)

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

need_java() {
	if ! command -v java >/dev/null 2>&1; then
		log "java not found: the real-broker tests need Java 17 or newer (apt-get install openjdk-17-jre-headless)"
		exit 1
	fi
	local v
	v=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
	if [ "${v%%.*}" -lt 17 ] 2>/dev/null; then
		log "java $v is too old: Kafka $version needs Java 17 or newer"
		exit 1
	fi
}

fetch() {
	if [ -f "$libs/.complete" ]; then
		return 0
	fi
	if ! command -v mvn >/dev/null 2>&1; then
		log "mvn not found: Maven fetches Kafka from Maven Central (apt-get install maven)"
		exit 1
	fi
	log "fetching Apache Kafka $version from Maven Central into $libs"
	local start=$SECONDS
	rm -rf "$libs"
	mkdir -p "$libs"
	mvn -B -q -f "$root/scripts/kafka/pom.xml" \
		-Dmaven.repo.local="$cache/m2" \
		-Dkafka.version="$version" \
		dependency:copy-dependencies \
		-DoutputDirectory="$libs" -DincludeScope=runtime >&2
	touch "$libs/.complete"
	log "fetched $(ls "$libs" | wc -l) jars in $((SECONDS - start))s"
}

pid_alive() {
	[ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# wait_ready asks every listener for metadata (the secured ones with
# SCRAM-SHA-512 and with the client certificate) until all answer, or fails.
wait_ready() {
	(cd "$root" && go run ./internal/kafkatest/cmd/kafkawait -brokers "$brokers" \
		-sasl-ssl "$sasl_ssl" -mtls "$mtls" -tls-dir "$tls" -timeout "${1:-90s}")
}

up() {
	need_java
	fetch
	if pid_alive; then
		if wait_ready 10s >/dev/null 2>&1; then
			log "already running (pid $(cat "$pidfile")) on $brokers"
			return 0
		fi
		log "pid $(cat "$pidfile") is alive but does not answer; restarting it"
		down
	fi
	mkdir -p "$run"
	if [ "${WEIR_KAFKA_KEEP_DATA:-0}" != 1 ]; then
		rm -rf "$run/data" "$run/data.users"
	fi
	if [ -f "$run/data/meta.properties" ] && [ ! -f "$run/data.users" ]; then
		log "the kept log directory $run/data has no SCRAM users (an older kafka.sh formatted it); start once without WEIR_KAFKA_KEEP_DATA=1"
		exit 1
	fi
	# New certificates with a new log directory; kept with a kept one, so
	# that clients of a restarted broker still trust it.
	if [ "${WEIR_KAFKA_KEEP_DATA:-0}" != 1 ] || [ ! -f "$tls/broker.pem" ]; then
		(cd "$root" && go run ./internal/kafkatest/cmd/kafkacerts -dir "$tls")
	fi
	local plain_jaas="" u
	for u in "${plain_users[@]}"; do
		plain_jaas+=" user_${u%%=*}=\"${u#*=}\""
	done
	cat >"$run/server.properties" <<EOF
# Written by scripts/kafka.sh: a single-node KRaft cluster for tests.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
# TLS (SASL_SSL and SSL): PEM files written by kafkacerts; the key is not
# encrypted, so there is no ssl.key.password.
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
listener.name.ssl.ssl.client.auth=required
# SASL_SSL: SCRAM users are added at format time (--add-scram), PLAIN users
# here; OAUTHBEARER takes unsecured JWTs (alg none: Kafka's default
# validator, OAuthBearerUnsecuredValidatorCallbackHandler). The broker's own
# OAUTHBEARER login has no token (it never connects with OAUTHBEARER).
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain_jaas;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
log.dirs=$run/data
num.partitions=1
auto.create.topics.enable=false
# One node: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests start groups often: no initial rebalance delay.
group.initial.rebalance.delay.ms=0
# Time retention is checked every 10 s, not every 5 minutes: a test whose
# topic holds records with old timestamps then fails every time, not once
# in a while when a check falls inside it.
log.retention.check.interval.ms=10000
# Transactions that time out are aborted within a second, so tests of that path are quick.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
EOF
	local start=$SECONDS
	if [ ! -f "$run/data/meta.properties" ]; then
		local cluster_id scram=()
		for u in "${scram_users[@]}"; do
			scram+=(--add-scram "SCRAM-SHA-256=[name=${u%%=*},password=${u#*=}]"
				--add-scram "SCRAM-SHA-512=[name=${u%%=*},password=${u#*=}]")
		done
		cluster_id=$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
		java -cp "$libs/*" kafka.tools.StorageTool format --standalone \
			-t "$cluster_id" -c "$run/server.properties" "${scram[@]}" >"$run/format.log" 2>&1 || {
			log "formatting the log directory failed:"
			tail -n 20 "$run/format.log" >&2
			exit 1
		}
		# The SCRAM users are in this log directory now (see above).
		printf '%s\n' "${scram_users[@]%%=*}" >"$run/data.users"
	fi
	: >"$logfile"
	# setsid: the broker outlives this shell and is not hit by the caller's ^C.
	setsid nohup java "-Xms$heap" "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-Djava.awt.headless=true \
		-Dorg.slf4j.simpleLogger.defaultLogLevel=info \
		-Dorg.slf4j.simpleLogger.showDateTime=true \
		-cp "$libs/*" kafka.Kafka "$run/server.properties" >>"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	if ! wait_ready 90s; then
		log "the broker did not answer on $brokers, $sasl_ssl (SASL_SSL) and $mtls (mTLS); last lines of $logfile:"
		tail -n 30 "$logfile" >&2
		down
		exit 1
	fi
	log "Apache Kafka $version up on $brokers, SASL_SSL $sasl_ssl, mTLS $mtls (pid $(cat "$pidfile")) in $((SECONDS - start))s"
}

down() {
	if ! pid_alive; then
		rm -f "$pidfile"
		return 0
	fi
	stop_pid "$pidfile" kafka.sh 30
	log "stopped"
}

status() {
	pid_alive && wait_ready 10s >/dev/null 2>&1
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
fetch) fetch ;;
env)
	printf 'export WEIR_KAFKA_BROKERS=%s\n' "$brokers"
	printf 'export WEIR_KAFKA_VERSION=%s\n' "$version"
	printf 'export WEIR_TEST_KAFKA_SASL_SSL=%s\n' "$sasl_ssl"
	printf 'export WEIR_TEST_KAFKA_MTLS=%s\n' "$mtls"
	printf 'export WEIR_TEST_KAFKA_TLS_DIR=%s\n' "$tls"
	;;
*)
	echo "usage: $0 up|down|status|env|fetch" >&2
	exit 2
	;;
esac

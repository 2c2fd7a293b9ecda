#!/usr/bin/env bash
# The fault suite (`make test-faults`): every scenario of e2e/faults and,
# alongside them, the producer-ID rotation test of e2e (TestProducerIDRotation...), on the
# real Kafka broker, which scripts/with-services.sh starts if it is not
# running. Scenarios that restart a broker or stop an S3 server start their
# own (ports 19392-19395 and 19300; WEIR_FAULTS_KAFKA_PORT, WEIR_FAULTS_S3_PORT).
# WEIR_FAULTS_RUN selects scenarios (a go test -run pattern). Ends with every
# scenario's `result:` lines.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

log=$(mktemp "${TMPDIR:-/tmp}/weir-test-faults.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$SECONDS
rc=0
WEIR_SERVICES=kafka bash scripts/with-services.sh bash -c '
	set -o pipefail
	rc=0
	# The rotation scenario (e2e, another package) runs alongside the
	# scenarios of e2e/faults: both spend most of their time waiting (for
	# session timeouts, outages, epochs), and run one after the other they
	# took 11 of the 30 minutes of CI. Its output is printed when both are done.
	rot=""
	if [ -z "${WEIR_FAULTS_RUN:-}" ]; then
		# The rotation scenario must exist. Listed into a variable: grep -q
		# could end go test with SIGPIPE, which pipefail would take for
		# "missing".
		listed=$(go test -list "^TestProducerIDRotation" ./e2e/)
		if grep -q "^TestProducerIDRotation" <<<"$listed"; then
			rot=$(mktemp "${TMPDIR:-/tmp}/weir-test-rotation.XXXXXX")
			go test -race -count=1 -v -timeout 15m -run "^TestProducerIDRotation" ./e2e/ >"$rot" 2>&1 &
			rotpid=$!
		else
			echo "test-faults: FAIL: no TestProducerIDRotation... in ./e2e/ (e2e/rotation_test.go): the producer-ID rotation scenario is missing" >&2
			rc=1
		fi
	fi
	WEIR_FAULTS=1 go test -race -count=1 -v -timeout "${WEIR_FAULTS_TIMEOUT:-20m}" \
		-run "${WEIR_FAULTS_RUN:-.}" ./e2e/faults/ || rc=1
	if [ -n "$rot" ]; then
		wait "$rotpid" || rc=1
		echo "== the rotation scenario (./e2e/, run alongside)"
		cat "$rot"
		rm -f "$rot"
	fi
	exit $rc
' 2>&1 | tee "$log" || rc=$?
echo "== fault suite results"
grep '^result: ' "$log" || echo "(no result lines)"
echo "make test-faults: $((SECONDS - start))s"
exit "$rc"

#!/usr/bin/env bash
# The full test suite (`make test`): every package with the race detector,
# against kfake, the real Kafka broker and the real S3 server, which
# scripts/with-services.sh starts if they are not running. The report counts
# the tests that ran against the real services; with WEIR_REQUIRE_REAL_KAFKA=1
# or WEIR_REQUIRE_S3=1 (as in CI) a run in which none of them passed fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

go build -o .cache/bin/testreport ./internal/tools/testreport
flags=()
[ "${WEIR_REQUIRE_REAL_KAFKA:-}" = 1 ] && flags+=(-require-kafka)
[ "${WEIR_REQUIRE_S3:-}" = 1 ] && flags+=(-require-s3)

# The packages, the longest-running first (CI has a 30-minute budget): go
# test runs them -p (the core count) at a time in this order, and one of
# several minutes started last would run alone at the end.
if [ -z "${WEIR_TEST_PKGS:-}" ]; then
	slow="./runtime/replica ./e2e ./cli ./kafkaio/sink ./e2e/nexmark ./state"
	rest=$(go list ./... | sed "s|^github.com/weir-stream/weir|.|" | grep -vxF -f <(tr ' ' '\n' <<<"$slow") | tr '\n' ' ')
	export WEIR_TEST_PKGS="$slow $rest"
fi

# promtool evaluates the chart's alert rules over a failed job's /metrics.
eval "$(bash scripts/promtool.sh env)"

start=$SECONDS
bash scripts/with-services.sh bash -c '
	set -o pipefail
	# The producer-ID rotation test (e2e) is a fault-suite scenario:
	# make test-faults runs it, so it is not run twice in CI.
	go test -race -count=1 -json -timeout "${WEIR_TEST_TIMEOUT:-25m}" -skip "^TestProducerIDRotation" ${WEIR_TEST_PKGS:-./...} |
		.cache/bin/testreport "$@"
' testreport "${flags[@]}"
echo "make test: $((SECONDS - start))s"

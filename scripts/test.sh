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

start=$SECONDS
bash scripts/with-services.sh bash -c '
	set -o pipefail
	# The producer-ID rotation test (e2e) is a fault-suite scenario:
	# make test-faults runs it, so it is not run twice in CI.
	go test -race -count=1 -json -timeout "${WEIR_TEST_TIMEOUT:-25m}" -skip "^TestProducerIDRotation" ${WEIR_TEST_PKGS:-./...} |
		.cache/bin/testreport "$@"
' testreport "${flags[@]}"
echo "make test: $((SECONDS - start))s"

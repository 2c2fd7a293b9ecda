# Weir's developer and CI entry points. `make help` lists them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
BIN         := bin
CACHE       := .cache
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X github.com/weir-stream/weir/cli.version=$(VERSION)
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(CACHE)/bin/staticcheck-$(STATICCHECK_VERSION)

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/processor
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/processor ./cmd/processor

.PHONY: run
run: build ## Run the example job on the embedded Kafka and a local object store (processor dev; ARGS='--http :8081' passes flags)
	$(BIN)/processor dev $(ARGS)

.PHONY: test
test: ## Every test, with -race, on kfake, the real Kafka broker, the real S3 server and the real schema registry (started if not running)
	bash scripts/test.sh

.PHONY: test-e2e
test-e2e: ## The end-to-end exactly-once test alone (kill -9, rescaling), on the real broker
	WEIR_SERVICES="kafka registry" WEIR_TEST_PKGS=./e2e/... bash scripts/test.sh

.PHONY: test-faults
test-faults: ## The fault suite on the real broker: pauses, kills, broker restart, storage outages, poison records, long outages, full disk, producer-ID rotation (WEIR_FAULTS_RUN=pattern selects)
	bash scripts/test-faults.sh

.PHONY: test-short
test-short: ## Unit and kfake tests only (no Java, no S3 server needed)
	env -u WEIR_KAFKA_BROKERS -u WEIR_S3_ENDPOINT -u WEIR_REQUIRE_REAL_KAFKA -u WEIR_REQUIRE_S3 \
		-u WEIR_TEST_KAFKA_SASL_SSL -u WEIR_TEST_KAFKA_MTLS -u WEIR_TEST_KAFKA_TLS_DIR \
		-u WEIR_REQUIRE_CLOUD -u WEIR_GCS_URL -u WEIR_AZBLOB_URL -u WEIR_REGISTRY_URL -u WEIR_REQUIRE_REGISTRY \
		$(GO) test -race -short -count=1 ./...

.PHONY: bench-kafkaio
bench-kafkaio: ## Benchmark on the real broker: raw franz-go pipe vs Weir source -> exactly-once sink (ARGS=-short for a smoke run)
	WEIR_SERVICES=kafka bash scripts/with-services.sh $(GO) run ./internal/tools/benchkafkaio $(ARGS)

.PHONY: bench
bench: build ## Product benchmark on the real broker: YAML count job vs raw franz-go pipe, checkpoint durations, e2e latency, recovery after kill -9 (ARGS=-short for a quick check; ARGS=-tls: plaintext vs SASL_SSL throughput and CPU; ARGS=-busy-cost: the count job with busy-time accounting on and off; ARGS=-two-stage: the views-per-page job vs a raw two-hop pipe, 3 passes each (-passes); ARGS=-window: the tumbling-window job vs a raw two-hop pipe, checkpoints with 1M open windows, window-end-to-result delay; ARGS=-yaml: the YAML language job (filter, map, key_by expression, multi-aggregate) vs a raw two-hop pipe, 3 passes each; ARGS=-expr: the cost of one expression evaluation, expr-lang vs cel-go, no broker; ARGS=-formats: decode and encode per record, Avro and Protobuf vs JSON, no broker; ARGS=-avro: the count job on Avro input vs the raw pipe, with the real schema registry; ARGS=-rolling: a rolling update of the count job on 3 replicas to v2 under steady input, time to v2's first committed output; ARGS='-grow-partitions 3': partitions added one at a time to a running count job's input, each timed from its addition to its first committed output)
	WEIR_SERVICES="kafka$(if $(findstring -avro,$(ARGS)), registry)" bash scripts/with-services.sh $(GO) run ./internal/tools/bench -processor $(BIN)/processor $(ARGS)

.PHONY: bench-api
bench-api: build ## The REST API's latency p50/p99 under the count job's full load on the real broker (bench -api; ARGS=-short for a quick check, ARGS='-replicas 2' to ask two replicas)
	WEIR_SERVICES=kafka bash scripts/with-services.sh $(GO) run ./internal/tools/bench -processor $(BIN)/processor -api $(ARGS)
.PHONY: bench-profile
bench-profile: build ## make bench without the recovery measurement, saving every replica's CPU and allocation profile of its whole run into .cache/profiles (go tool pprof -top .cache/profiles/<job>-r1.cpu.pprof); ARGS as for bench
	WEIR_SERVICES=kafka bash scripts/with-services.sh $(GO) run ./internal/tools/bench -processor $(BIN)/processor -skip-recovery -profile .cache/profiles $(ARGS)

.PHONY: bench-nexmark
bench-nexmark: build ## Nexmark on the real broker: each YAML query of examples/nexmark (exactly-once sinks, a checkpoint every second) over 10M generated events vs the raw pipe, CPU per event, checkpoint durations, state size (ARGS=-short: 1M events)
	WEIR_SERVICES=kafka bash scripts/with-services.sh $(GO) run ./internal/tools/nexmarkbench -processor $(BIN)/processor $(ARGS)

.PHONY: cloud-up cloud-down
cloud-up: ## Start the gs:// and azblob:// emulators (fake-gcs-server, Azurite); installs them first
	bash scripts/cloud.sh up
cloud-down: ## Stop the emulators
	bash scripts/cloud.sh down

.PHONY: helm-check
helm-check: build ## Lint and render the Helm chart, validate the configuration it renders (installs a pinned prebuilt helm into ~/.cache/weir on first use)
	bash scripts/helm-check.sh

.PHONY: schema
schema: ## Regenerate docs/job.schema.json and the chart's config.job schema from the config types
	go run ./internal/tools/jobschema

.PHONY: image
image: ## Build the container image weir:$(VERSION) with docker (Dockerfile)
	docker build --build-arg VERSION=$(VERSION) -t weir:$(VERSION) .

.PHONY: lint
lint: $(STATICCHECK) ## gofmt check, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>&1); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	mkdir -p $(CACHE)/bin
	GOBIN=$(abspath $(CACHE))/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(CACHE)/bin/staticcheck $@

.PHONY: kafka-up kafka-down
kafka-up: ## Start the real Kafka broker (fetched with Maven on first use)
	bash scripts/kafka.sh up
kafka-down: ## Stop the real Kafka broker
	bash scripts/kafka.sh down

.PHONY: s3-up s3-down
s3-up: ## Start the real S3-compatible server
	bash scripts/s3.sh up
s3-down: ## Stop the real S3-compatible server
	bash scripts/s3.sh down

.PHONY: bench-state bench-state-short
bench-state: ## State backend benchmarks at full size (1 GiB of state; several minutes; WEIR_BENCH_STATE_SIZE overrides)
	$(GO) run ./state/statebench
bench-state-short: ## State backend benchmarks at small sizes (under a minute, for CI)
	$(GO) run ./state/statebench -short

.PHONY: clean
clean: ## Remove build output (keeps the download cache in .cache/)
	rm -rf $(BIN)

# dlock: make test runs what CI runs; make demo shows the locks at work.
# Recipes run in bash with pipefail: a benchmark that fails inside a pipe
# to tee fails the target.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

GO          ?= go
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
BENCH_COUNT ?= 5
BENCH_TIME  ?= 1000x
BENCH_OUT   ?= bench/raw.txt

.PHONY: all services test lint bench demo faults

all: lint test

# The fault suite with FAULT_ROUNDS rounds of every fault per backend
# (make test runs one), then each name-encoding fuzzer for FUZZ_TIME. The
# lines with "ops checked" are the summary.
FAULT_ROUNDS ?= 5
FUZZ_TIME    ?= 30s
FUZZERS      := .:FuzzValidateName ./adapters/zk:FuzzEscape ./advisory:FuzzNames ./adapters/redis:FuzzKeys
faults: services
	DLOCK_REQUIRE_SERVICES=1 DLOCK_FAULT_ROUNDS=$(FAULT_ROUNDS) $(GO) test -race -count=1 -timeout 60m -v ./faults
	for f in $(FUZZERS); do $(GO) test -run '^$$' -fuzz "^$${f#*:}$$" -fuzztime $(FUZZ_TIME) "$${f%%:*}" || exit 1; done

# Start (and install where missing) the servers tests and the demo use,
# the deployments the tests reach them through: PgBouncer, and a MariaDB
# Galera cluster (whose nodes run as user mysql: as root); promtool, and
# Curator for Java (zklock's interoperability tests).
services:
	scripts/services.sh up
	scripts/services.sh pgbouncer
	scripts/services.sh galera
	scripts/services.sh promtool
	scripts/services.sh curator

# The whole suite against real servers, race detector on; a missing server
# fails instead of skipping.
test: services
	DLOCK_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 25m ./...

# gofmt, go.mod tidy, vet, and the linters of .golangci.yml (errcheck,
# staticcheck, …).
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

# Benchmarks W1 (uncontended), W2 (contended), W3 (a seckill sale, 100
# buyers) and the herd (64 waiters) for every backend, with the peers, one
# package at a time (-p 1: two packages measured at once on a 2-core
# machine measure each other). BENCH_COUNT passes each run every benchmark
# once, so a dlock row and its peers run seconds apart in every pass, and
# benchtable pairs them by pass: a pass the machine slowed down moves both
# sides of a ratio. The raw output (benchstat format) is kept in
# $(BENCH_OUT).
bench: services
	@mkdir -p $(dir $(BENCH_OUT))
	@: > $(BENCH_OUT)
	for pass in $$(seq $(BENCH_COUNT)); do \
		DLOCK_REQUIRE_SERVICES=1 $(GO) test -p 1 -run '^$$' -bench 'Uncontended|Contended' -benchmem -benchtime $(BENCH_TIME) -count 1 ./... | tee -a $(BENCH_OUT) || exit 1; \
		DLOCK_REQUIRE_SERVICES=1 $(GO) test -p 1 -run '^$$' -bench 'Herd|Seckill' -benchtime 1x -count 1 ./... | tee -a $(BENCH_OUT) || exit 1; \
	done
	@mkdir -p docs
	$(GO) run ./internal/cmd/benchtable -doc docs/benchmarks.md -command "make bench BENCH_COUNT=$(BENCH_COUNT)" < $(BENCH_OUT)
	@$(GO) run ./internal/cmd/benchtable < $(BENCH_OUT)

# A flash sale on PostgreSQL with every strategy, side by side (a minute
# on a quiet machine, several on a busy 2-core one);
# the chart goes to sale.svg. Then the inventory service, 4 processes over
# HTTP, each inventory strategy for 5s (about half a minute); its latency chart goes to
# load.svg.
demo: services
	$(GO) run ./cmd/seckill run --db postgres --strategy all --stock 500 --buyers 100 --migrate --chart sale.svg
	$(GO) run ./cmd/seckill load --db postgres --stock 5000 --buyers 1000 --procs 4 --rate 2000 --duration 5s --migrate --chart load.svg

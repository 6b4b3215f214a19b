# idem: make help lists the targets.
SHELL := /bin/bash
GO    ?= go
PKGS  ?= ./...
# make test runs two go test at once. The harness suites (e2e, the chaos
# campaign, the benchmarks' tests) drive idem as child processes built
# without the race detector, so their own binaries go without it too: they
# start on the packages go vet has just compiled, while the race build of
# everything else is still compiling, instead of after it (on a cold cache
# that build alone is about 160 s of a 2-core machine). Every package whose
# code runs in those processes has race-detected tests of its own.
# Each run starts its longest suites first (go test runs packages in the
# order given), so that the short ones fill the slots at the end; two
# packages at once for the harness, three for the race run (the harness
# suites mostly wait on their child processes).
# The temporary files (the test clusters, the JetStream stores, the test
# binaries) go to a directory of scripts/test-tmpdir.sh, on /dev/shm when
# it has room, removed at the end.
# -vet=off: the vet target ran every analyzer go test would, and more, on
# the same packages, test files included. -ldflags=-w: no DWARF in the test
# binaries, a quarter less linking.
HARNESS_PKGS ?= ./e2e/ ./bench/chaos/ ./bench/
# The campaign of the faults beyond the default one's runs in a go test of
# its own, beside the rest of its package: one package's tests run one
# after another, and the two campaigns mostly wait on their processes.
FAULTS_TEST = TestChaosFaultsShort
TEST_FIRST ?= ./handlers/ ./internal/cli/ ./internal/statuspage/ ./sources/files/ \
	./audit/ ./consumer/ ./sources/pgsource/ ./strategies/ ./internal/service/ ./internal/localpg/ ./internal/reverify/
TEST_P ?= 3
HARNESS_P ?= 2
TEST_FLAGS = -vet=off -count=1 -ldflags=-w -timeout 15m
FUZZTIME ?= 30s
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: help build postgres pgbouncer chromium recipe-tools test-tools s3-server test test-statement-modes test-short tidy-check alerts-test vet lint fuzz demo clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/idem
	$(GO) build -o bin/idem ./cmd/idem

postgres: ## install PostgreSQL server binaries when missing (tests start their own cluster)
	@bash scripts/ensure-postgres.sh

pgbouncer: ## install Debian's pgbouncer when missing (the pooler tests)
	@bash scripts/ensure-pgbouncer.sh

chromium: ## install Debian's chromium when missing (the status page's browser tests)
	@bash scripts/ensure-chromium.sh

recipe-tools: ## install curl, jq, flock and python3 when missing (the scheduler recipes' commands, run by the e2e tests)
	@bash scripts/ensure-recipe-tools.sh

# What the tests run, installed or built when missing, one after another
# (apt holds one lock): make test does it beside go vet, whose compiling
# wants the CPU while this mostly waits for the network and the disk.
test-tools: ## install or build what the tests run when missing (PostgreSQL, pgbouncer, chromium, the recipes' tools, promtool, versitygw)
	@$(MAKE) --no-print-directory -j1 postgres pgbouncer chromium recipe-tools alerts-test s3-server

s3-server: ## build the versitygw S3 server the object-store tests run, when missing (once, into ~/.cache/idem-tools)
	@bash scripts/ensure-versitygw.sh

vet: ## go vet
	$(GO) vet $(PKGS)

test: ## vet, go.mod tidy, then every test with the race detector against real PostgreSQL (chaos with its fixed seed)
	@$(MAKE) --no-print-directory -j3 test-tools vet tidy-check
ifeq ($(PKGS),./...)
	@export TMPDIR=$$(bash scripts/test-tmpdir.sh); trap 'rm -rf "$$TMPDIR"' EXIT; \
	$(GO) test $(TEST_FLAGS) -p $(HARNESS_P) -skip '^$(FAULTS_TEST)$$' $(HARNESS_PKGS) & harness=$$!; \
	$(GO) test $(TEST_FLAGS) -run '^$(FAULTS_TEST)$$' ./bench/chaos/ & faults=$$!; \
	$(GO) test -race $(TEST_FLAGS) -p $(TEST_P) $(TEST_FIRST) $$($(GO) list ./... | grep -vE '/idem/(e2e|bench|bench/chaos)$$'); race=$$?; \
	wait $$harness; harness=$$?; wait $$faults; faults=$$?; \
	if [ $$race -ne 0 ] || [ $$harness -ne 0 ] || [ $$faults -ne 0 ]; then \
		echo "make test: FAIL (race run exit $$race, harness run exit $$harness, $(FAULTS_TEST) exit $$faults)"; exit 1; fi
else
	@export TMPDIR=$$(bash scripts/test-tmpdir.sh); trap 'rm -rf "$$TMPDIR"' EXIT; \
	$(GO) test -race $(TEST_FLAGS) -p $(TEST_P) $(PKGS)
endif

# The statement modes (postgres.statement_mode): the suites that send idem's
# SQL, with every pool in the mode named (make test covers describe through
# the end-to-end pooler suites: behind a pooler auto picks describe).
STATEMENT_MODE_PKGS = ./handlers/ ./strategies/ ./audit/ ./internal/relay/ ./internal/reverify/ ./internal/statuspage/ ./internal/deadletter/

test-statement-modes: postgres chromium ## the suites that send idem's SQL, in statement_mode prepare and describe (about 5 min each)
	for m in prepare describe; do echo "== statement_mode $$m"; \
		IDEM_TEST_STATEMENT_MODE=$$m $(GO) test -count=1 $(STATEMENT_MODE_PKGS) || exit 1; done

test-short: postgres ## the quick tests only (-short: no chaos campaign, no race detector)
	$(GO) test -short -count=1 $(PKGS)

alerts-test: ## promtool test rules on the shipped alert rules (installs Debian's prometheus package when missing: promtool here, the server for the e2e alert tests)
	@bash scripts/ensure-promtool.sh
	cd deploy/prometheus && promtool check rules idem-alerts.yaml && promtool test rules idem-alerts.test.yaml

tidy-check: ## fail when go mod tidy would change go.mod or go.sum
	@out=$$($(GO) mod tidy -diff) || { echo "go.mod/go.sum are not tidy; run go mod tidy:"; echo "$$out"; exit 1; }

lint: vet ## go vet and staticcheck
	$(GO) run $(STATICCHECK) $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME each
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./schemas/
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./internal/config/
	$(GO) test -run='^$$' -fuzz='^FuzzLexer$$' -fuzztime=$(FUZZTIME) ./internal/sqlcheck/

demo: postgres build ## the main job on an embedded default: nothing to start by hand (Ctrl-C stops it)
	@./bin/idem dev

clean: ## remove build output
	rm -rf bin

# Chaos campaigns (bench/chaos): the knobs are read from the environment.
# The long faults (warehouse and NATS outages, rolling restarts, failovers)
# have knobs of their own: CHAOS_LONG_ROUNDS (rounds of each, failovers too),
# CHAOS_WAREHOUSE_DOWN_MIN, CHAOS_WAREHOUSE_DOWN_MAX, CHAOS_NATS_DOWN.
CHAOS_EVENTS   ?= 30000
CHAOS_DURATION ?= 25m
CHAOS_SEED     ?=
CHAOS_REPLICAS ?= 3
CHAOS_ENV = CHAOS_EVENTS=$(CHAOS_EVENTS) CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_REPLICAS=$(CHAOS_REPLICAS)

.PHONY: property
property: postgres ## the handlers' property tests with 500 random histories each, from a random seed (printed); make test runs 30 from a fixed one
	@seed=$$(( ($$(od -An -N4 -tu4 /dev/urandom) % 999999999) + 1 )); echo "property: seed $$seed"; \
	IDEM_PROPERTY_CHECKS=500 $(GO) test -count=1 -timeout 60m -run '^TestProperty' -rapid.seed=$$seed ./handlers/

.PHONY: chaos chaos-short chaos-pooler chaos-cluster chaos-cluster-short chaos-groups

chaos: postgres ## long chaos campaign (CHAOS_EVENTS, CHAOS_DURATION, CHAOS_SEED, CHAOS_REPLICAS); a random seed unless CHAOS_SEED; figures in bin/chaos-report.json
	@mkdir -p bin
	@seed=$(CHAOS_SEED); seed=$${seed:-$$(( ($$(od -An -N4 -tu4 /dev/urandom) % 999999999) + 1 ))}; \
	echo "chaos: seed $$seed (replay with make chaos CHAOS_SEED=$$seed)"; \
	CHAOS_LONG=1 CHAOS_SEED=$$seed $(CHAOS_ENV) CHAOS_REPORT=$(CURDIR)/bin/chaos-report.json \
		$(GO) test -count=1 -timeout 3h -run '^TestChaosCampaign$$' -v ./bench/chaos/
	$(MAKE) chaos-cluster-short
	$(MAKE) property
	$(MAKE) fuzz FUZZTIME=1m

chaos-short: postgres ## the short chaos campaign that make test runs (about 2.5 minutes, a fixed seed; CHAOS_SEED to try another)
	CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -timeout 10m -run '^TestChaosShort$$' -v ./bench/chaos/

chaos-pooler: postgres pgbouncer ## the short chaos campaign with the replicas behind a real PgBouncer (transaction mode) and pooler restarts among the faults (about 3 min)
	CHAOS_POOLER=transaction CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -timeout 10m -run '^TestChaosPoolerShort$$' -v ./bench/chaos/

# The cluster campaign: three nats-server processes, R3 streams, Toxiproxy on
# the client links and the routes. Its own defaults (100,000 events over
# 75 minutes) unless CHAOS_EVENTS or CHAOS_DURATION are given.
CLUSTER_EVENTS   = $(if $(filter command line environment,$(origin CHAOS_EVENTS)),$(CHAOS_EVENTS),100000)
CLUSTER_DURATION = $(if $(filter command line environment,$(origin CHAOS_DURATION)),$(CHAOS_DURATION),75m)
CHAOS_CLUSTER_REPORT ?= $(CURDIR)/bin/chaos-cluster-report.json

chaos-cluster: postgres ## long cluster campaign (3 NATS servers, R3; CHAOS_EVENTS, CHAOS_DURATION, CHAOS_SEED, CHAOS_REPLICAS); figures in bin/chaos-cluster-report.json
	@mkdir -p $(dir $(CHAOS_CLUSTER_REPORT))
	@seed=$(CHAOS_SEED); seed=$${seed:-$$(( ($$(od -An -N4 -tu4 /dev/urandom) % 999999999) + 1 ))}; \
	echo "chaos-cluster: seed $$seed (replay with make chaos-cluster CHAOS_SEED=$$seed)"; \
	CHAOS_LONG=1 CHAOS_SEED=$$seed CHAOS_EVENTS=$(CLUSTER_EVENTS) CHAOS_DURATION=$(CLUSTER_DURATION) CHAOS_REPLICAS=$(CHAOS_REPLICAS) \
		CHAOS_REPORT=$(CHAOS_CLUSTER_REPORT) \
		$(GO) test -count=1 -timeout 4h -run '^TestChaosClusterCampaign$$' -v ./bench/chaos/

chaos-cluster-short: postgres ## the short cluster campaign (three nats-server, R3; about 2.5 minutes, a fixed seed; CHAOS_SEED to try another)
	CHAOS_CLUSTER=1 CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -timeout 10m -run '^TestChaosClusterShort$$' -v ./bench/chaos/

.PHONY: chaos-full
chaos-full: postgres ## the full campaign: every fault kind and every kind of dataset on three nats-server (100,000 events over 100 min by default; CHAOS_EVENTS, CHAOS_DURATION, CHAOS_SEED); figures in bin/chaos-full-report.json
	@seed=$${CHAOS_SEED:-$$(( $$(date +%s%N) % 1000000000 ))}; \
	echo "chaos-full: seed $$seed (replay with make chaos-full CHAOS_SEED=$$seed)"; \
	CHAOS_LONG=1 CHAOS_FULL=1 CHAOS_SEED=$$seed CHAOS_REPORT=$(CURDIR)/bin/chaos-full-report.json \
		$(GO) test -count=1 -timeout 4h -run '^TestChaosFullCampaign$$' -v ./bench/chaos/

.PHONY: chaos-faults
chaos-faults: postgres ## the focused campaign of each fault kind beyond the default campaign's (site crash, full disk, full streams, clock steps, source failover, object store), with their mechanism tests (about 9 min; needs root for the tmpfs)
	CHAOS_FAULTS=1 $(GO) test -count=1 -timeout 30m -run '^(TestChaos(SiteCrash|DiskFull|StorageFull|ClockStep|SourceFailover|ObjectStore|Timely)Short|TestSiteCrashSparesTheCrashBudget|TestBallastFillsTheDataDirectory)$$' -v ./bench/chaos/

# Benchmarks (bench/): ratios of idem to the bare SQL, pgbench and a naive
# consumer, measured in one run. IDEM_DATABASE_URL / IDEM_NATS_URL point the
# harness at existing servers; by default it starts its own.
.PHONY: bench bench-quick bench-history bench-cold bench-cold-quick bench-sources bench-docs

# The lone-event phase (i) compares this build with an earlier one, built
# from git: by default the last commit before group loads.
BENCH_BASELINE ?= f354f1f
BENCH_BASELINE_LABEL ?= $(BENCH_BASELINE), the last commit before group loads

bin/idem-$(BENCH_BASELINE):
	@mkdir -p bin; d=$$(mktemp -d); git archive $(BENCH_BASELINE) | tar -x -C $$d && \
		(cd $$d && $(GO) build -o $(CURDIR)/$@ ./cmd/idem); s=$$?; rm -rf $$d; exit $$s

bench: postgres bin/idem-$(BENCH_BASELINE) ## full benchmark (15-40 min): table on stdout, bench/results/full.json, docs/BENCHMARKS.md, bench/FIGURES.md and its chart; then bench-history, bench-sources and bench-cold
	$(GO) run ./bench/cmd/idembench -mode full -json bench/results/full.json -docs docs \
		-baseline bin/idem-$(BENCH_BASELINE) -baseline-label "$(BENCH_BASELINE_LABEL)"
	$(MAKE) bench-history
	$(MAKE) bench-sources BENCH_DOCS_FROM="-report bench/results/full.json"
	$(MAKE) bench-cold BENCH_DOCS_FROM="-report bench/results/full.json"

bench-quick: postgres ## benchmark smoke run (about 1-2 min): table on stdout, bench/results/quick.json
	$(GO) run ./bench/cmd/idembench -mode quick -json bench/results/quick.json

# The saved runs docs/BENCHMARKS.md and bench/FIGURES.md are rendered from,
# after the day-one targets and figures that bench-cold puts first and
# with the sources section bench-sources writes (make bench, whose full run
# measures every phase, passes its own full.json alone).
BENCH_DOCS_FROM ?= -report bench/results/full.json -statements bench/results/statements-full.json
BENCH_DOCS = $(GO) run ./bench/cmd/idembench $(BENCH_DOCS_FROM) -coldreport bench/results/cold-full.json -sources bench/results/sources-full.json -docs docs >/dev/null

bench-cold: postgres ## the day-one scenario (up to 30 min): a fresh install's first backfill on 0 to 10M attempts of history, bench/results/cold-full.json, then docs/BENCHMARKS.md and bench/FIGURES.md again with it first
	$(GO) run ./bench/cmd/idembench -mode full -cold bench/results/cold-full.json
	$(BENCH_DOCS)

bench-docs: ## docs/BENCHMARKS.md and bench/FIGURES.md again from the saved runs in bench/results/ (nothing runs)
	$(BENCH_DOCS)

bench-sources: postgres ## files and another PostgreSQL as sources (about 10 min; versitygw, a second cluster): 1M rows against psql, idem's peak RSS over 1 GiB files; bench/results/sources-full.json, then the docs again
	IDEM_BENCH_SOURCES=full IDEM_BENCH_SOURCES_OUT=$(CURDIR)/bench/results/sources-full.json \
		$(GO) test -count=1 -run '^TestSources$$' -v -timeout 4h ./bench/
	$(BENCH_DOCS)

bench-cold-quick: postgres ## the day-one scenario at 0 and 1k attempts, 600 events (1-2 min): table on stdout, bin/cold-quick.json
	$(GO) run ./bench/cmd/idembench -mode quick -cold bin/cold-quick.json

bench-history: postgres ## the audit lookups at 100k and 10M attempts side by side (about 3 min); see bench/HISTORY-COSTS.md
	IDEM_BENCH_HISTORY=1 IDEM_BENCH_HISTORY_OUT=$(CURDIR)/bin $(GO) test -count=1 -run '^TestHistoryCosts$$' -v -timeout 60m ./bench/

chaos-groups: postgres ## the short chaos campaigns, single server and cluster, with group loads forced to 1, 2 and 32 events (make test runs the single-server one at the default 8); about 4 min each
	for n in 1 2 32; do for c in TestChaosShort TestChaosClusterShort; do echo "== $$c, max_group $$n"; \
		CHAOS_CLUSTER=1 IDEM_NATS_MAX_GROUP=$$n $(GO) test -count=1 -run "^$$c\$$" -v -timeout 20m ./bench/chaos/ || exit 1; done; done

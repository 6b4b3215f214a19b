# idem: make help lists the targets.
SHELL := /bin/bash
GO    ?= go
PKGS  ?= ./...
FUZZTIME ?= 30s
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: help build postgres test test-short vet lint fuzz demo clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/idem
	$(GO) build -o bin/idem ./cmd/idem

postgres: ## install PostgreSQL server binaries when missing (tests start their own cluster)
	@bash scripts/ensure-postgres.sh

vet: ## go vet
	$(GO) vet $(PKGS)

test: postgres vet ## vet, then every test with the race detector against real PostgreSQL
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

test-short: postgres ## tests without the race detector
	$(GO) test -count=1 $(PKGS)

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

# Taskmesh — a control plane for GPU workloads.
#
# Two commands are all a newcomer needs:
#   make run    start Taskmesh on its embedded defaults (Postgres, Kafka broker, all services)
#   make test   run every test (real Postgres, real Kafka-protocol broker)

SHELL      := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
BIN        := $(CURDIR)/bin
export GOPROXY ?= https://proxy.golang.org,direct
export GOFLAGS ?= -buildvcs=false
export PATH    := $(BIN):$(PATH)

# Every module of the workspace (go.work), as package patterns.
MODULES    := ./gen/... ./platform/... ./services/gateway/... ./services/scheduler/... \
              ./services/quota/... ./services/executor/... ./services/consumers/... ./services/taskmesh/... ./tools/protoc/...
PLUGINS    := $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway \
              $(BIN)/protoc-gen-openapiv2 $(BIN)/protosrc
TESTFLAGS  ?= -race -count=1 -timeout 40m
# make bench BENCHRUNS=5: every figure is the median of that many runs.
BENCHRUNS  ?= 3
BENCHFLAGS ?= --runs $(BENCHRUNS)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: build ## Start Taskmesh on embedded defaults (bin/taskmesh dev, with the shim and the stage worker beside it); data under .taskmesh/. DEV_FLAGS adds flags of taskmesh dev (e.g. --no-agent).
	# What dev runs beyond Go (PostgreSQL, ffmpeg and a CJK font), installed
	# as root when missing, else named; Taskmesh starts either way.
	tools/test-deps.sh --run
	$(BIN)/taskmesh dev $(DEV_FLAGS)

# The version the binary and the image say (taskmesh version).
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE      ?= ghcr.io/taskmesh/taskmesh
GOARCH_IMG ?= $(shell go env GOARCH)

.PHONY: build
build: ## Build the taskmesh binary and, beside it, the per-task shim (taskmesh-shim) and the pipeline's stage worker (taskmesh-stage) into bin/.
	go build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/taskmesh ./services/taskmesh/cmd/taskmesh
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/taskmesh-shim ./services/executor/cmd/taskmesh-shim
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/taskmesh-stage ./services/executor/cmd/taskmesh-stage

.PHONY: image
image: ## Build the container image without Docker: OCI layout bin/image/taskmesh and docker-load tarball bin/image/taskmesh.tar.
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMG) go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" \
	  -o $(BIN)/linux/taskmesh ./services/taskmesh/cmd/taskmesh
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMG) go build -trimpath -ldflags "-s -w" -o $(BIN)/linux/taskmesh-shim ./services/executor/cmd/taskmesh-shim
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMG) go build -trimpath -ldflags "-s -w" -o $(BIN)/linux/taskmesh-stage ./services/executor/cmd/taskmesh-stage
	go run ./services/taskmesh/cmd/taskmesh-image -binary $(BIN)/linux/taskmesh -shim $(BIN)/linux/taskmesh-shim -stage $(BIN)/linux/taskmesh-stage -version $(VERSION) -arch $(GOARCH_IMG) \
	  -tags $(IMAGE):$(VERSION),$(IMAGE):latest -layout $(BIN)/image/taskmesh -tarball $(BIN)/image/taskmesh.tar

.PHONY: test-deps
test-deps: ## Install what the tests run beyond Go (as root, with apt-get), or name what is missing and stop.
	tools/test-deps.sh

# The slowest packages, listed first. go test starts the packages' test
# binaries in the order it is given them, as many at once as there are
# cores, so a long package listed last runs alone at the end while the
# other core idles. Listed first, they run beside the many short ones.
# A package named twice runs once.
SLOWEST_TESTS := ./services/taskmesh/internal/e2e ./services/taskmesh/internal/slurme2e \
                 ./services/executor/internal/backends/slurm ./services/taskmesh/cmd/taskmesh \
                 ./services/taskmesh/internal/ociimage ./services/taskmesh/internal/chaos \
                 ./services/executor/internal/agent

.PHONY: test
test: test-deps check-generated check-console ## Run all tests with the race detector (fails when gen/ or the console is stale).
	go test $(TESTFLAGS) $(SLOWEST_TESTS) $(MODULES)

# The web console: TypeScript sources in $(CONSOLE)/web, built by the
# esbuild that package-lock.json pins into $(CONSOLE)/dist, which is
# committed and embedded in the binary.
CONSOLE := services/gateway/internal/console

.PHONY: console
console: ## Build the web console (npm ci, esbuild) into its committed dist/.
	cd $(CONSOLE)/web && npm ci --no-audit --no-fund --silent && npm run --silent build

.PHONY: check-console
check-console: ## Fail when the console's dist/ differs from what `make console` builds.
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd $(CONSOLE)/web && npm ci --no-audit --no-fund --silent && OUT="$$tmp" npm run --silent build); \
	if ! diff -r -q "$$tmp" $(CONSOLE)/dist; then \
	  echo "$(CONSOLE)/dist is stale: run 'make console' and commit the result" >&2; exit 1; fi

.PHONY: bench
bench: build ## Run the benchmarks (durable Postgres, embedded Kafka) and print medians of the runs.
	# Before anything starts: every program the benchmarks run, or the
	# apt-get command that installs what is missing.
	$(BIN)/taskmesh bench check
	$(BIN)/taskmesh bench all $(BENCHFLAGS)
	# In-process costs: the rate limiter's decision (mean and p99), the
	# admission core's scheduling, an attempt's journal calls on an agent,
	# and a heartbeat's, a claim's and a task's calls to the scheduler's
	# store (and the claims a task wakes among waiting agents, on one
	# replica and on two), BENCHRUNS runs each, printed as medians. One
	# package at a time: each measures alone, not beside another's.
	go test -p 1 -run '^$$' -bench . -count $(BENCHRUNS) ./services/gateway/internal/ratelimit/ ./services/quota/internal/domain/admitcore/ \
	  ./services/executor/internal/journal/ ./services/scheduler/internal/adapters/postgres/ \
	  | $(BIN)/taskmesh bench medians

# Loading a month of history takes minutes, so `bench all` leaves this
# one out (docs/operations.md, "Measuring at scale").
.PHONY: bench-scale
bench-scale: build ## Measure claims, lists, submission, projection and admission on a month of history (1M tasks) against an empty database.
	$(BIN)/taskmesh bench check
	$(BIN)/taskmesh bench scale $(BENCHFLAGS)

# make chaos CHAOS_DURATION=2m CHAOS_RATE=20 CHAOS_SEED=42: the fault-injection
# suite (docs/chaos.md); CHAOS_SEED replays a run's fault schedule.
CHAOS_DURATION ?= 10m
CHAOS_RATE     ?= 50
CHAOS_SEED     ?= 0

.PHONY: chaos
chaos: build ## Run Taskmesh as separate processes under load and faults, then check the invariants (docs/chaos.md).
	$(BIN)/taskmesh chaos --duration $(CHAOS_DURATION) --rate $(CHAOS_RATE) --seed $(CHAOS_SEED)

# make fuzz FUZZTIME=2m: how long each fuzz target runs.
FUZZTIME   ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (30s) each; print executions per target. make test runs their corpora.
	@summary=$$(mktemp); trap 'rm -f "$$summary"' EXIT; \
	for file in $$(grep -rl --include='*_test.go' '^func Fuzz' platform services | sort); do \
	  dir=$$(dirname "$$file"); \
	  for name in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' "$$file" | cut -d' ' -f2); do \
	    echo "== $$name ($$dir, $(FUZZTIME))"; \
	    if ! out=$$(go test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) "./$$dir" 2>&1); then \
	      echo "$$out"; echo "fuzz: $$name failed; the input is in $$dir/testdata/fuzz/$$name/" >&2; exit 1; fi; \
	    execs=$$(echo "$$out" | grep -o 'execs: [0-9]*' | tail -1 | cut -d' ' -f2 || true); \
	    printf '%-28s %-56s %12s\n' "$$name" "$$dir" "$${execs:-?}" >> "$$summary"; \
	  done; \
	done; \
	echo; printf '%-28s %-56s %12s\n' TARGET PACKAGE EXECUTIONS; cat "$$summary"

.PHONY: tools
tools: $(BIN)/buf $(PLUGINS) ## Build buf and the protoc plugins from pinned modules.

# buf needs a newer google.golang.org/protobuf than the runtime pins, so it
# has its own module outside go.work.
$(BIN)/buf: tools/buf/go.mod tools/buf/go.sum
	cd tools/buf && GOWORK=off go build -o $(BIN)/buf github.com/bufbuild/buf/cmd/buf

$(BIN)/protosrc: tools/protoc/protosrc/main.go tools/protoc/go.mod
	go build -o $(BIN)/protosrc ./tools/protoc/protosrc

# Plugins are built from the workspace's own module graph so generated code
# matches the runtime libraries exactly.
$(BIN)/protoc-gen-go: tools/protoc/go.mod
	go build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go
$(BIN)/protoc-gen-go-grpc: tools/protoc/go.mod
	go build -o $@ google.golang.org/grpc/cmd/protoc-gen-go-grpc
$(BIN)/protoc-gen-grpc-gateway: tools/protoc/go.mod
	go build -o $@ github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway
$(BIN)/protoc-gen-openapiv2: tools/protoc/go.mod
	go build -o $@ github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2

.PHONY: third-party-protos
third-party-protos: $(BIN)/protosrc
	rm -rf third_party/proto
	$(BIN)/protosrc -out third_party/proto

.PHONY: generate
generate: tools third-party-protos ## Regenerate gen/ from proto/.
	rm -rf gen/taskmesh gen/openapi/*.json
	$(BIN)/buf generate
	$(BIN)/buf generate --template buf.gen.openapi.yaml
	$(BIN)/buf generate --template buf.gen.openapi-video.yaml

.PHONY: check-generated
check-generated: tools third-party-protos ## Fail when gen/ differs from what `make generate` produces.
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BIN)/buf generate -o "$$tmp"; \
	$(BIN)/buf generate --template buf.gen.openapi.yaml -o "$$tmp"; \
	$(BIN)/buf generate --template buf.gen.openapi-video.yaml -o "$$tmp"; \
	if ! diff -r -q -x go.mod -x go.sum -x openapi.go "$$tmp/gen" gen; then \
	  echo "gen/ is stale: run 'make generate' and commit the result" >&2; exit 1; fi

.PHONY: lint
lint: tools third-party-protos ## buf lint, buf format, buf breaking, gofmt, go vet on every module.
	$(BIN)/buf lint
	$(BIN)/buf format --diff --exit-code proto
	# Against the merge base with main on a branch, else the previous commit
	# (BUF_BREAKING_AGAINST=<rev> overrides); skipped with a notice when
	# that commit is not in the clone.
	tools/buf-breaking.sh $(BIN)/buf
	@unformatted=$$(gofmt -l gen platform services tools); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet $(MODULES)

.PHONY: clean
clean: ## Remove build output and the dev data directory.
	rm -rf bin third_party .taskmesh

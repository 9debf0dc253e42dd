# sriov-stable-cni — one module, static binaries, tests in private namespaces.
GO       ?= go
MODULE   := github.com/sriov-stable-cni/sriov-stable-cni
BIN      := $(CURDIR)/bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X $(MODULE)/pkg/buildinfo.Version=$(VERSION) -X $(MODULE)/pkg/buildinfo.Commit=$(COMMIT)
GOBUILD  := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

export CGO_ENABLED := 0

.PHONY: all build tools helm-tool print-helm chart test-chart demo test test-quick test-unit test-integration vet fmt-check lint lint-tool lab lab-soak cluster-e2e image bench fleet-bench soak fuzz clean

all: build

## build: the CNI plugin and the agent, static.
build:
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/sriov-stable-cni ./cmd/sriov-stable-cni
	$(GOBUILD) -o $(BIN)/sriov-stable-agent ./cmd/sriov-stable-agent

## tools: the upstream plugins the tests chain with (containernetworking/plugins v1.10.0, pinned in go.mod).
tools:
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/host-device github.com/containernetworking/plugins/plugins/main/host-device
	$(GOBUILD) -o $(BIN)/tuning github.com/containernetworking/plugins/plugins/meta/tuning
	$(GOBUILD) -o $(BIN)/rename-as-udev ./integration/testplugins/rename-as-udev

## demo: a chain through libcni in private namespaces: rename repaired, drift caught, clean DEL.
demo: build tools
	$(GO) run ./integration/demo -bin-dir $(BIN)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Fixture sysfs trees are thousands of small files; tmpfs builds them ~50x faster.
TEST_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo /tmp)

test-unit:
	TMPDIR=$(TEST_TMPDIR) $(GO) test -count=1 $$($(GO) list ./... | grep -v -e /integration/ -e /deploy/helm)

## test-chart: the Helm chart rendered, linted and compared with deploy/'s manifests (deploy/helm/chart_test.go).
test-chart: helm-tool
	HELM=$(HELM) $(GO) test -count=1 ./deploy/helm/

## test-integration: privileged; each test package re-executes itself in private namespaces.
test-integration: build tools
	TMPDIR=$(TEST_TMPDIR) CNI_TEST_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 20m ./integration/...

## test-quick: vet, format, unit and privileged integration suites, the chart's tests, the two-arch image (make image:
## its arm64 binaries run under qemu-user, which is not the QEMU lab), lint (no QEMU lab).
test-quick: vet fmt-check test-unit test-integration test-chart image lint

## lint: golangci-lint with .golangci.yml (netlink dumps through netlinksafe, funlen, dupl), at the pinned version,
## built once into $(TOOLS_CACHE) (outside the repo; make test builds it in the background meanwhile).
GOLANGCI_VERSION := v2.15.0
TOOLS_CACHE      ?= /var/cache/sriov-stable-tools
GOLANGCI         := $(TOOLS_CACHE)/golangci-lint-$(GOLANGCI_VERSION)/golangci-lint
lint: lint-tool
	$(GOLANGCI) run ./...

## lint-tool: build the pinned golangci-lint unless cached; flock: one build at a time, a second caller waits for it.
lint-tool:
	@mkdir -p $(dir $(GOLANGCI))
	@flock $(dir $(GOLANGCI)).lock sh -c '[ -x $(GOLANGCI) ] || { echo "building golangci-lint $(GOLANGCI_VERSION) into $(dir $(GOLANGCI))"; \
		GOBIN=$(dir $(GOLANGCI)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); }'

## helm-tool: the helm CLI of Helm $(HELM_VERSION), built from Helm's Go library in its own module (tools/helm), for
## the chart's tests (deploy/helm/chart_test.go) and make chart; cached in $(TOOLS_CACHE) like the linter.
HELM_VERSION := v4.3.2
HELM         := $(TOOLS_CACHE)/helm-$(HELM_VERSION)/helm
helm-tool:
	@mkdir -p $(dir $(HELM))
	@flock $(dir $(HELM)).lock sh -c '[ -x $(HELM) ] || { echo "building helm $(HELM_VERSION) into $(dir $(HELM))"; \
		cd tools/helm && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" \
		-o $(HELM).tmp helm.sh/helm/v4/cmd/helm && mv $(HELM).tmp $(HELM); }'

print-helm:
	@echo $(HELM)

## chart: lint the Helm chart and package it into bin/; with CHART_REGISTRY=oci://HOST/PATH also push it there as an
## OCI artifact (helm registry login first when the registry wants one).
CHART_DIR      := deploy/helm/sriov-stable-cni
CHART_REGISTRY ?=
chart: helm-tool
	$(HELM) lint --strict $(CHART_DIR)
	@mkdir -p $(BIN)
	$(HELM) package $(CHART_DIR) --destination $(BIN)
	@if [ -n "$(CHART_REGISTRY)" ]; then $(HELM) push $(BIN)/sriov-stable-cni-$$(sed -n 's/^version: //p' $(CHART_DIR)/Chart.yaml).tgz $(CHART_REGISTRY); fi

## test: every test: test-quick, then the QEMU SR-IOV lab and the Kubernetes e2e, whose upstream components build
## meanwhile in the background at idle priority (integration/test-all.sh).
test:
	MAKE='$(MAKE)' bash integration/test-all.sh

## image: the container image as one OCI image index (an OCI layout archive) of a linux/amd64 and a linux/arm64 image,
## cross-built static (GOARCH, no emulation) and written without a container engine (tools/mkimage); then the tests
## inspect it and run the arm64 binaries under qemu-user (qemu-aarch64-static; skipped when missing unless CI is set).
## The host arch's image holds exactly `make build`'s binaries, which the cluster e2e compares against.
IMAGE             ?= ghcr.io/sriov-stable-cni/sriov-stable-cni
IMAGE_TAG         ?= $(VERSION)
IMAGE_TAR         := $(BIN)/sriov-stable-cni-image.tar
IMAGE_ARCHS       := amd64 arm64
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image: build
	@set -e; for a in $(IMAGE_ARCHS); do \
		echo "building linux/$$a into $(BIN)/linux-$$a"; \
		GOOS=linux GOARCH=$$a $(GOBUILD) -o $(BIN)/linux-$$a/sriov-stable-cni ./cmd/sriov-stable-cni; \
		GOOS=linux GOARCH=$$a $(GOBUILD) -o $(BIN)/linux-$$a/sriov-stable-agent ./cmd/sriov-stable-agent; \
	done
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./tools/mkimage \
		$(foreach a,$(IMAGE_ARCHS),-platform linux/$(a)=$(BIN)/linux-$(a)/sriov-stable-cni,$(BIN)/linux-$(a)/sriov-stable-agent) \
		-ref $(IMAGE):$(IMAGE_TAG) -version $(VERSION) -out $(IMAGE_TAR)
	MKIMAGE_ARCHIVE=$(IMAGE_TAR) MKIMAGE_BINARY=$(BIN)/sriov-stable-cni MKIMAGE_AGENT=$(BIN)/sriov-stable-agent \
		$(GO) test -count=1 -v -run '^(TestImageArchive|TestArm64UnderQemu)$$' ./tools/mkimage

## lab: the QEMU SR-IOV lab (docs/lab.md): real igbvf VFs, the chain through libcni and Multus.
lab:
	bash integration/lab/run.sh

## cluster-e2e: a single-node Kubernetes built here (every version pinned in integration/cluster/versions.env,
## binaries cached in /var/cache/sriov-stable-cluster) inside private namespaces on a fixture DGX node: the DaemonSet,
## NADs through the Multus thin plugin, VFs from a device plugin, drift, churn with restarts, an upgrade, pod start
## latency (docs/cluster-e2e.md). Prints the figures; leaves nothing behind.
cluster-e2e:
	bash integration/cluster/run.sh

## lab-soak: the lab's real-VF soak alone, 200 ADD/CHECK/DEL cycles (make lab runs 40); prints the figures.
lab-soak:
	LAB_SOAK_CYCLES=$${LAB_SOAK_CYCLES:-200} LAB_RUN='^TestLab13RealVFSoak$$' bash integration/lab/run.sh

## soak: the full reliability soak (integration/reliability): 1,000 ADD/CHECK/DEL cycles with renames and
## vanished namespaces, and 500 crash runs (SIGKILL at the plugin's crash points); prints the figures. CI runs the
## same tests smaller.
SOAK_CYCLES ?= 1000
CRASH_RUNS  ?= 500
soak: build tools
	TMPDIR=$(TEST_TMPDIR) CNI_TEST_BIN_DIR=$(BIN) SRIOV_SOAK_CYCLES=$(SOAK_CYCLES) SRIOV_CRASH_RUNS=$(CRASH_RUNS) \
		$(GO) test -count=1 -timeout 60m -v -run '^(TestSoak|TestCrashDuringAdd)$$' ./integration/reliability/

## fuzz: each fuzz target for FUZZTIME, one at a time with one worker (plain `go test` runs their seed corpus).
FUZZTIME     ?= 5m
FUZZ_TARGETS := pkg/config:FuzzParse pkg/config:FuzzRenderAltName pkg/plugin:FuzzCorrectResult \
                pkg/sysfs:FuzzSysfsValues pkg/sysfs:FuzzReadVF pkg/sysfs:FuzzGUIDIndexUnmarshal
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz: $$fn in ./$$pkg for $(FUZZTIME)"; \
		TMPDIR=$(TEST_TMPDIR) $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -parallel 1 ./$$pkg; \
	done

## bench: what the plugin costs a pod start, beside tuning and a do-nothing chained plugin (integration/bench,
## docs/performance.md); privileged, in private namespaces. Exits 1 when a target is missed. Not part of test:
## timings are not tests. BASELINE=FILE adds another sriov-stable-cni binary as a fifth chain (an A/B in one run);
## BENCH_FLAGS passes other flags, e.g. BENCH_FLAGS='-rounds 400'.
BENCH_FLAGS ?=
BASELINE    ?=
bench: build tools
	$(GOBUILD) -o $(BIN)/noop-chained ./integration/testplugins/noop-chained
	$(GO) run ./integration/bench -bin-dir $(BIN) $(if $(BASELINE),-baseline $(abspath $(BASELINE))) $(BENCH_FLAGS)

## fleet-bench: the fabric ledger at fleet scale (integration/fleetbench, docs/performance.md): etcd and kube-apiserver
## built as the cluster e2e builds them (cached), 100 to 1,000 simulated nodes of 64 VFs publishing through the agent's
## publisher, two replicas of the real controller; privileged (private namespaces). Writes its figures into
## docs/performance.md and exits 1 when a target is missed; about 20 minutes. Not part of test, as bench.
## FLEET_FLAGS passes other flags, e.g. FLEET_FLAGS='-scales 100,200 -injections 10 -idle 30s' (then no doc is written
## unless -doc is given again).
FLEET_WORK  ?= /var/tmp/sriov-stable-fleet-bench
FLEET_FLAGS ?= -doc docs/performance.md
fleet-bench: build
	bash integration/cluster/build.sh $(FLEET_WORK)/bin etcd kubernetes
	$(GOBUILD) -o $(FLEET_WORK)/fleet-bench ./integration/fleetbench
	rm -rf $(FLEET_WORK)/logs $(FLEET_WORK)/var-log
	$(FLEET_WORK)/fleet-bench -bin $(FLEET_WORK)/bin -agent $(BIN)/sriov-stable-agent -crd deploy/fabric/crd.yaml \
		-work $(FLEET_WORK) -command 'make fleet-bench' -version $(VERSION) $(FLEET_FLAGS)

clean:
	rm -rf $(BIN)

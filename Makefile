# itemops — run `make help` for the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Pinned tools live in their own module (hack/tools/go.mod) so that their
# dependencies never move the operator's.
GO_TOOL     ?= go tool -modfile=$(CURDIR)/hack/tools/go.mod
CONTROLLER_GEN ?= $(GO_TOOL) controller-gen
KUSTOMIZE   ?= $(GO_TOOL) kustomize

CRD_DIR     := config/crd/bases
CHART_CRDS  := charts/itemops/files/crds
CHART_RBAC  := charts/itemops/files/rbac
VERSION     ?= $(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' charts/itemops/Chart.yaml)
IMG         ?= ghcr.io/itemops/itemops:$(VERSION)
RUN_ARGS    ?=

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-20s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRD and RBAC manifests from the markers in the code.
	$(CONTROLLER_GEN) rbac:roleName=itemops-manager crd paths="./..." output:crd:artifacts:config=$(CRD_DIR) output:rbac:artifacts:config=config/rbac
	rm -rf $(CHART_CRDS) && mkdir -p $(CHART_CRDS) && cp $(CRD_DIR)/*.yaml $(CHART_CRDS)/
	mkdir -p $(CHART_RBAC) && cp config/rbac/role.yaml config/rbac/velero_plugins_role.yaml config/rbac/velero_plugins_clusterrole.yaml $(CHART_RBAC)/
	cp config/velero-before-1.18/datauploads_cluster_list.yaml $(CHART_RBAC)/velero_plugins_before_1.18.yaml

.PHONY: generate
generate: ## Generate the DeepCopy methods of the API types and the Go code of the plugin protocol.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."
	hack/update-proto.sh

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: verify
verify: ## Fail when generated files (dist/install.yaml too) are stale, code is unformatted, or kustomize cannot build config/.
	hack/verify-generated.sh
	@unformatted="$$(gofmt -s -l $$(find . -name '*.go' -not -path './.git/*'))"; \
	  if [[ -n "$$unformatted" ]]; then echo "gofmt -s needed on: $$unformatted" >&2; exit 1; fi
	@for dir in config/default config/manage config/prometheus config/crd config/samples; do \
	  $(KUSTOMIZE) build $$dir > /dev/null || { echo "kustomize build $$dir failed" >&2; exit 1; }; \
	done

.PHONY: envtest
envtest: ## Build (once per machine) the kube-apiserver and etcd the tests run against.
	@hack/envtest-assets.sh

# LABELS (a Ginkgo label filter) and FOCUS (a regular expression on the specs'
# descriptions) run a subset: `make test LABELS=velero`, `make test FOCUS="cancel"`.
# The JUnit reports, one per suite, go to ARTIFACTS. See docs/testing.md.
LABELS    ?=
FOCUS     ?=
ARTIFACTS ?= $(CURDIR)/_artifacts

.PHONY: test
# Everything make test compiles, the test binaries, go vet, the images'
# programs and the Kubernetes binaries, is built with one set of flags:
# static, without this machine's paths, without debug information, as the
# Dockerfile and the other projects' builds (hack/cached-binary.sh) do.
# Go's build cache keys each package by its flags, so with one set what they
# share compiles once: the Kubernetes and helm builds use itemops's module
# versions (hack/go-align.sh). The race detector (RACE=1) needs cgo: then the
# test binaries keep Go's defaults.
ifneq ($(RACE),1)
test test-quick: export CGO_ENABLED := 0
test test-quick: export GOFLAGS := $(strip $(shell go env GOFLAGS) -trimpath -gcflags=all=-dwarf=false)
endif
test: ## Check generated files, vet, and run every suite, the real Velero end-to-end suites included (LABELS=, FOCUS= run a subset; JUnit reports in _artifacts/).
	@# The test binaries (kube-apiserver, etcd, velero-plugin-for-aws, velero,
	@# versitygw, helm, the CSI snapshot controller and external-provisioner)
	@# are built once per machine. The suites start once envtest's control
	@# plane is built; each waits, through the scripts' locks, for what else
	@# it runs. On a new machine what the real-node suite, the longest, waits
	@# for comes first: the node's Kubernetes binaries build right after the
	@# control plane, beside the other projects' programs (side by side: one
	@# after another, the control plane came sooner and those programs later,
	@# and test/cluster's lane outlived its TIMEOUT); the other Ginkgo suites
	@# wait for them (hack/test.sh); and the check of generated files, vet, the pinned
	@# promtool, Prometheus and bundle writer and the programs only test/release runs
	@# (cosign, opm, cyclonedx-gomod), which it does not need, run at the
	@# lowest priority beside the suites, taking the CPU they leave from the
	@# start; what they find is printed at the end. What those download
	@# comes first, at the normal priority: at the lowest, on a loaded new
	@# machine, the module proxy's TLS handshakes ran out of their 10 s.
	@# Each build's and each lane's start and end go to ITEMOPS_TEST_TIMES:
	@# the run ends, red or green, with where its time went
	@# (test/cmd/testtimes).
	began="$$(date +%s)"; node_out="$$(mktemp)"; csi_out="$$(mktemp)"; vet_out="$$(mktemp)"; verify_out="$$(mktemp)"; \
	  export ITEMOPS_TEST_TIMES="$$(mktemp)"; trap 'rm -f "$$node_out" "$$csi_out" "$$vet_out" "$$verify_out" "$$ITEMOPS_TEST_TIMES"' EXIT; \
	  timed() { echo "build $$1 start $$(date +%s)" >> "$$ITEMOPS_TEST_TIMES"; "$${@:2}" || return; echo "build $$1 end $$(date +%s)" >> "$$ITEMOPS_TEST_TIMES"; }; \
	  { timed control-plane hack/envtest-assets.sh control-plane && timed node-binaries hack/envtest-assets.sh; } > /dev/null 2> "$$node_out" & node=$$!; \
	  timed velero-plugin-for-aws hack/velero-plugin-for-aws.sh > /dev/null & aws=$$!; \
	  timed velero hack/cached-binary.sh velero > /dev/null & velero=$$!; \
	  timed versitygw hack/cached-binary.sh versitygw > /dev/null & s3=$$!; \
	  timed helm hack/cached-binary.sh helm > /dev/null & helm=$$!; \
	  { timed snapshot-controller hack/cached-binary.sh snapshot-controller && timed csi-provisioner hack/cached-binary.sh csi-provisioner; } > /dev/null 2> "$$csi_out" & csi=$$!; \
	  go -C hack/tools/image build -o /dev/null . & image=$$!; \
	  hack/cluster-packages.sh & packages=$$!; \
	  { go -C hack/tools/prometheus list -deps -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus ./promql-names > /dev/null && \
	    nice -n 19 go -C hack/tools/prometheus build -tags remove_all_sd -o /dev/null github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus ./promql-names; } & promtool=$$!; \
	  { go -C hack/tools/bundle list -deps . > /dev/null && nice -n 19 go -C hack/tools/bundle build -o /dev/null .; } & bundle=$$!; \
	  release=0; if [ -z '$(LABELS)$(FOCUS)' ]; then \
	    { hack/go-std.sh && for b in cosign opm cyclonedx-gomod; do ITEMOPS_BUILD_NICE=19 timed "$$b" hack/cached-binary.sh "$$b" || exit; done; } > /dev/null 2>&1 & release=$$!; \
	  fi; \
	  { go list -deps -test ./... > /dev/null && nice -n 19 $(MAKE) --no-print-directory vet; } > "$$vet_out" 2>&1 & vet=$$!; \
	  { go mod download -modfile=hack/tools/go.mod && go mod download -modfile=hack/tools/proto/go.mod && \
	    nice -n 19 $(MAKE) --no-print-directory verify; } > "$$verify_out" 2>&1 & verify=$$!; \
	  assets="$$(hack/envtest-assets.sh control-plane)"; wait $$packages; \
	  status=0; KUBEBUILDER_ASSETS="$$assets" LABELS='$(LABELS)' FOCUS='$(FOCUS)' ARTIFACTS='$(ARTIFACTS)' hack/test.sh || status=$$?; \
	  wait $$verify || { echo "=== make verify failed:"; cat "$$verify_out"; status=1; }; \
	  wait $$vet || { echo "=== go vet failed:"; cat "$$vet_out"; status=1; }; \
	  wait $$node || { echo "=== building the Kubernetes binaries failed:"; cat "$$node_out"; status=1; }; \
	  wait $$csi || { echo "=== building the CSI snapshot controller or external-provisioner failed:"; cat "$$csi_out"; status=1; }; \
	  for job in aws velero s3 helm image promtool bundle; do wait "$${!job}" || { echo "=== building $$job failed (the suites that run it say why)"; status=1; }; done; \
	  [ "$$release" = 0 ] || wait $$release || { echo "=== building cosign, opm or cyclonedx-gomod failed (test/release says why)"; status=1; }; \
	  go run ./test/cmd/testtimes -times "$$ITEMOPS_TEST_TIMES" -began "$$began" '$(ARTIFACTS)'/*_report.json || true; \
	  exit $$status

.PHONY: test-quick
test-quick: ## The inner loop: generated files, vet, and every suite that needs neither the real node nor the real velero server (unit, envtest, chart, CRD, CLI, docs, layers); not the chaos run or test/release. A few minutes once the control plane is built; make test runs everything.
	@# vet and the check of generated files run beside the suites, at the
	@# lowest priority; what they find is printed at the end.
	vet_out="$$(mktemp)"; verify_out="$$(mktemp)"; trap 'rm -f "$$vet_out" "$$verify_out"' EXIT; \
	  nice -n 19 $(MAKE) --no-print-directory vet > "$$vet_out" 2>&1 & vet=$$!; \
	  nice -n 19 $(MAKE) --no-print-directory verify > "$$verify_out" 2>&1 & verify=$$!; \
	  status=0; KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh control-plane)" QUICK=1 LABELS='$(LABELS)' FOCUS='$(FOCUS)' ARTIFACTS='$(ARTIFACTS)' hack/test.sh || status=$$?; \
	  wait $$verify || { echo "=== make verify failed:"; cat "$$verify_out"; status=1; }; \
	  wait $$vet || { echo "=== go vet failed:"; cat "$$vet_out"; status=1; }; \
	  exit $$status

.PHONY: test-e2e
test-e2e: ## Run only the end-to-end suites (label e2e): the itemops binary, itemops beside the real velero server, on Velero's CSI data mover, kubectl-itemops, an upgrade in flight from an earlier commit (needs the git history), and itemops installed on a real one-node cluster (needs root).
	hack/cluster-packages.sh
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" ITEMOPS_UPGRADE=1 LABELS='e2e$(if $(LABELS), && ($(LABELS)))' FOCUS='$(FOCUS)' ARTIFACTS='$(ARTIFACTS)' RACE=0 hack/test.sh

# The Velero releases test-compat runs, oldest first: the newest patch of each
# minor the module proxy serves.
VELERO_VERSIONS ?= 1.15.2 1.16.2 1.17.2 1.18.3

.PHONY: test-compat
test-compat: ## Run itemops beside each Velero release of VELERO_VERSIONS (v1.15 to v1.18), building each velero server once per machine; results in test/compat/results.md. make test runs the default release (v1.18.3) alone.
	hack/velero-plugin-for-aws.sh > /dev/null & aws=$$!; \
	  hack/cached-binary.sh versitygw > /dev/null & s3=$$!; \
	  hack/cached-binary.sh helm > /dev/null & helm=$$!; \
	  assets="$$(hack/envtest-assets.sh)"; \
	  for v in $(VELERO_VERSIONS); do VELERO_VERSION="$${v#v}" hack/cached-binary.sh velero > /dev/null; done; \
	  wait $$aws; wait $$s3; wait $$helm; \
	  KUBEBUILDER_ASSETS="$$assets" ITEMOPS_VELERO_VERSIONS='$(VELERO_VERSIONS)' ITEMOPS_COMPAT_RESULTS=$(CURDIR)/test/compat/results.md \
	  PACKAGES=./test/compat LABELS=compat TIMEOUT=90m ARTIFACTS='$(ARTIFACTS)' hack/test.sh

# The Kubernetes releases test-kube runs, oldest first: the newest patch of
# each minor the module proxy serves. KUBE_CLUSTER=0 leaves out the real
# one-node cluster (which needs root) at the oldest and the newest.
KUBE_VERSIONS ?= 1.31.12 1.32.13 1.33.13 1.34.12 1.35.8 1.36.3 1.37.2
KUBE_CLUSTER  ?= 1

.PHONY: test-kube
test-kube: ## Run the suites that need only an API server at each Kubernetes release of KUBE_VERSIONS (1.31 to 1.37) beside the Velero release of its era, and the real one-node cluster at the oldest (helm 3) and the newest (helm 4), building each release once per machine; results in test/kube/results.md.
	KUBE_VERSIONS='$(KUBE_VERSIONS)' KUBE_CLUSTER='$(KUBE_CLUSTER)' LABELS='$(LABELS)' FOCUS='$(FOCUS)' ARTIFACTS='$(ARTIFACTS)' hack/test-kube.sh

.PHONY: test-olm
test-olm: ## Run the suite of OLM on a real one-node cluster (needs root, as test/cluster): Velero in openshift-adp as OADP makes it, OLM v0.36.0 and a registry in the cluster, itemops installed and upgraded from its catalog by docs/openshift.md's commands.
	OLM=1 PACKAGES=./test/olm ARTIFACTS='$(ARTIFACTS)' hack/test.sh

# FUZZTIME bounds each fuzz target of test-chaos; CHAOS_DURATION, CHAOS_BACKUPS
# and CHAOS_OPERATIONS size its chaos run (make test runs 40s, 6 × 8).
FUZZTIME ?= 1m
CHAOS_DURATION ?= 5m
CHAOS_BACKUPS ?= 20
CHAOS_OPERATIONS ?= 20

.PHONY: test-chaos
test-chaos: ## Run the chaos suite (label chaos) for CHAOS_DURATION (5m; results in test/chaos/results), then every fuzz target for FUZZTIME (1m). make test runs a shorter chaos run and the fuzz seeds.
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" ITEMOPS_CHAOS_DURATION=$(CHAOS_DURATION) ITEMOPS_CHAOS_BACKUPS=$(CHAOS_BACKUPS) \
	  ITEMOPS_CHAOS_OPERATIONS=$(CHAOS_OPERATIONS) ITEMOPS_CHAOS_RESULTS=$(CURDIR)/test/chaos/results \
	  LABELS=chaos ARTIFACTS='$(ARTIFACTS)' RACE=0 hack/test.sh
	go test -run '^$$' -fuzz '^FuzzOperationsFile$$' -fuzztime $(FUZZTIME) ./controllers
	go test -run '^$$' -fuzz '^FuzzFormat$$' -fuzztime $(FUZZTIME) ./internal/progress
	go test -run '^$$' -fuzz '^FuzzETA$$' -fuzztime $(FUZZTIME) ./internal/progress
	go test -run '^$$' -fuzz '^FuzzNext$$' -fuzztime $(FUZZTIME) ./internal/rollup

.PHONY: bench
bench: ## Measure itemops at 1,000 and 10,000 operations over 100 Backups; then Velero's data mover and side by side with Velero; results in test/bench/results (about 70 minutes on 2 cores).
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go run ./test/bench $(BENCH_ARGS)

# SOAK_DURATION is how long make soak streams Backups; SOAK_ARGS more flags
# of test/soak (-peak, -per-backup, -fault-every, -retention, -seed).
SOAK_DURATION ?= 1h
SOAK_ARGS ?=

.PHONY: soak
soak: ## Run itemops under a stream of Backups (10,000 operations in flight) with faults for SOAK_DURATION (1h), and check that its memory, goroutines, files, plugin processes, watches and queue stay flat; results in test/soak/results.
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go run ./test/soak -duration=$(SOAK_DURATION) $(SOAK_ARGS)

##@ Build

.PHONY: build
build: ## Build the manager into bin/itemops, and the kubectl plugin into bin/kubectl-itemops with its completion helper.
	go build -o bin/itemops .
	go build -o bin/kubectl-itemops ./cmd/kubectl-itemops
	install -m 0755 cmd/kubectl-itemops/kubectl_complete-itemops bin/

.PHONY: krew
krew: ## Build the kubectl plugin's archives for linux and darwin, amd64 and arm64, into dist/krew/ and write their checksums into krew/itemops.yaml.
	go run ./hack/krew -version v$(VERSION) -out dist/krew -manifest krew/itemops.yaml

.PHONY: run
run: ## Run the manager from your host against the cluster of your kubeconfig.
	go run . $(RUN_ARGS)

.PHONY: image
image: ## Build the manager image without a Docker engine into bin/image/: an OCI image layout (oci/, linux/amd64 and linux/arm64) and a tarball for docker load (itemops.tar), named $(IMG).
	OUT="$(CURDIR)/bin/image" IMG="$(IMG)" VERSION="$(VERSION)" hack/image.sh

.PHONY: docker-build
docker-build: ## Build the container image with a Docker engine (the Dockerfile; make image needs none).
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION="$$(git rev-parse HEAD)" -t $(IMG) .

.PHONY: build-installer
BUNDLE_VALUES   ?= config/olm/values.yaml
BUNDLE_DIR      ?= bundle
BUNDLE_CHANNEL  ?= stable
BUNDLE_REPLACES ?=
BUNDLE_IMG      ?= ghcr.io/itemops/itemops-bundle:$(VERSION)
BUNDLE_IMG_DIR  ?= bin/bundle-image
CATALOG_DIR     ?= catalog
CATALOG_IMG     ?= ghcr.io/itemops/itemops-catalog:$(VERSION)
CATALOG_IMG_DIR ?= bin/catalog-image

.PHONY: bundle
bundle: ## Write the OLM bundle of $(VERSION) into $(BUNDLE_DIR)/ (ClusterServiceVersion with the chart rendered with $(BUNDLE_VALUES) and the image $(IMG), the CRD, metadata) and check it with operator-framework's validators (BUNDLE_REPLACES=0.0.9 for an upgrade).
	hack/bundle.sh "$(IMG)" "$(VERSION)" "$(BUNDLE_VALUES)" "$(BUNDLE_DIR)" "$(BUNDLE_CHANNEL)" "$(BUNDLE_REPLACES)"

.PHONY: bundle-image
bundle-image: ## Write the bundle image $(BUNDLE_IMG) of $(BUNDLE_DIR)/ into $(BUNDLE_IMG_DIR)/ (OCI layout oci/, tarball image.tar, ref: its name by digest) and print its digest.
	hack/olm-image.sh bundle "$(BUNDLE_DIR)" "$(BUNDLE_IMG)" "$(BUNDLE_IMG_DIR)"

.PHONY: catalog
catalog: ## Write an OLM file-based catalog into $(CATALOG_DIR)/ with opm: CATALOG_BUNDLES="dir=image@sha256:... ..." (oldest first, each replacing the one before; default: $(BUNDLE_DIR) as $(BUNDLE_IMG_DIR)/ref, make bundle-image's).
	hack/catalog.sh "$(CATALOG_DIR)" "$(BUNDLE_CHANNEL)" $(or $(CATALOG_BUNDLES),"$(BUNDLE_DIR)=$$(cat $(BUNDLE_IMG_DIR)/ref)")

.PHONY: catalog-image
catalog-image: ## Write the image $(CATALOG_IMG) of the catalog $(CATALOG_DIR)/ (opm serve, as opm generate dockerfile describes it) into $(CATALOG_IMG_DIR)/ (oci/, image.tar, ref) and print its digest.
	hack/olm-image.sh catalog "$(CATALOG_DIR)" "$(CATALOG_IMG)" "$(CATALOG_IMG_DIR)"

build-installer: ## Write dist/install.yaml: everything config/default installs, with the image $(IMG), in one file for GitOps.
	hack/build-installer.sh "$(IMG)" > dist/install.yaml

.PHONY: release
release: ## Write a release into dist/$(VERSION)/: install.yaml, the helm chart, kubectl-itemops for linux/darwin amd64/arm64 and its krew manifest, the image (OCI layout and docker tarball), release notes, CycloneDX SBOMs, SHA256SUMS and its cosign signature (VERSION=v0.1.0 COSIGN_KEY=cosign.key; UNSIGNED=1 for none).
	hack/release.sh "$(VERSION)"

##@ Deployment

.PHONY: install
install: ## Install the CRDs into the cluster of your kubeconfig (needs kubectl).
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: ## Remove the CRDs (and every ItemOperation) from the cluster.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found -f -

.PHONY: deploy
deploy: ## Deploy the manager with config/default into the cluster (needs kubectl).
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove what deploy created.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

.PHONY: cluster
cluster: ## Run a real one-node Kubernetes here (needs root; installs containerd, runc, the CNI plugins and iptables with apt-get when missing) with Velero and itemops installed as the README says; prints how to reach it; Ctrl-C tears it all down.
	hack/cluster-packages.sh
	@go run ./test/cmd/cluster $(CLUSTER_ARGS)

##@ Demo

# DEMO=synthetic shows itemops without the real Velero (nothing to build but
# kube-apiserver and etcd); DEMO_ARGS are passed on (go run ./test/cmd/demo -h).
DEMO ?= real

.PHONY: picture
picture: ## Draw `kubectl itemops watch` on the demo's real Backup into docs/images (an animated SVG of the run and a still one), through a pseudo-terminal and a terminal emulator; about 2 minutes once the demo's binaries are built.
	go run ./test/cmd/picture -out docs/images

.PHONY: demo
demo: ## Run the real Velero and itemops end to end on a local control plane, building what they need the first time (DEMO=synthetic: without Velero). Ctrl-C ends it.
	@echo "==> compiling the demo (the first time on a machine: a few minutes)"
	@go run ./test/cmd/demo -flow=$(DEMO) $(DEMO_ARGS)

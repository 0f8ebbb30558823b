# nad-service-controller — `make help` lists the targets.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# Set CARGO_TARGET_DIR to keep build outputs outside the work tree (CI does).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
BIN := $(TARGET_DIR)/release/nad-service-controller
WASM_TARGET := wasm32-wasip2
PLUGIN_DIR := $(TARGET_DIR)/$(WASM_TARGET)/wasm-release
RUN_ARGS ?= --leader-election=false
# The static (musl) binaries, as the images hold: hack/static-cargo.sh builds them, with the same
# target and flags as the tests, the fault tests, the demo and clippy (one build for all).
STATIC_DIR = $(shell hack/static-cargo.sh --release-dir)
STATIC_OUT ?= $(TARGET_DIR)/static
# `make image-oci`: the images as OCI layouts, without a container engine (hack/image-oci.sh): the
# controller's and the network prober's.
IMAGE_LAYOUT ?= $(TARGET_DIR)/image/oci
PROBER_IMAGE_LAYOUT ?= $(TARGET_DIR)/image/prober-oci
# Images: `make image` pushes $(IMAGE) and the prober's $(PROBER_IMAGE); KinD gets $(KIND_IMAGE)
# and $(KIND_PROBER_IMAGE), loaded without a registry.
IMAGE_REPO ?= ghcr.io/ihcsim/nad-service-controller
PROBER_IMAGE_REPO ?= ghcr.io/ihcsim/nad-network-prober
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMAGE ?= $(IMAGE_REPO):$(IMAGE_TAG)
PROBER_IMAGE ?= $(PROBER_IMAGE_REPO):$(IMAGE_TAG)
KIND_CLUSTER_NAME ?= nad-service-controller
KIND_IMAGE ?= nad-service-controller:dev
KIND_PROBER_IMAGE ?= nad-network-prober:dev
# Which deploy/overlays/ directory `apply`, `apply-kind` and `delete` use: default or with-plugins.
OVERLAY ?= default
KUBECTL ?= kubectl
RELEASE_MANIFEST ?= deploy/deploy.yaml
export KIND_CLUSTER_NAME

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: wasm-target
wasm-target: ## Install the wasm32-wasip2 Rust target if it is missing
	@rustup target list --installed | grep -qx '$(WASM_TARGET)' || rustup target add $(WASM_TARGET)

.PHONY: build
build: wasm-target ## Build the controller (with the default plugin inside) to $(TARGET_DIR)/release/
	$(CARGO) build --release --locked -p nad-service-controller
	@echo "built $(BIN)"

.PHONY: plugins
plugins: wasm-target ## Build the plugins as components to $(TARGET_DIR)/wasm32-wasip2/wasm-release/
	$(CARGO) build --locked --target $(WASM_TARGET) --profile wasm-release -p nad-default-plugin
	@ls -l $(PLUGIN_DIR)/*.wasm

.PHONY: build-static
build-static: wasm-target ## Build the static (musl) controller and prober binaries to $(STATIC_OUT)/, as the images hold
	@# The controller with the packages and features of the tests (hack/test.sh): their build is
	@# this one. The prober on its own: built with the controller, it would get the features the
	@# controller's dependencies ask of shared crates (rustls with sigstore's aws-lc backend: 24 of
	@# aws-lc's symbols, which rbac.rs's the_prober_image_holds_the_prober_alone refuses).
	CARGO="$(CARGO)" hack/static-cargo.sh build --release --locked -p nad-service-controller -p nad-prober -p node-sim
	@mkdir -p $(STATIC_OUT)
	cp $(STATIC_DIR)/nad-service-controller $(STATIC_OUT)/
	CARGO="$(CARGO)" hack/static-cargo.sh build --release --locked -p nad-prober
	cp $(STATIC_DIR)/nad-network-prober $(STATIC_OUT)/
	@# Stripped here rather than by the profile: a profile setting would change every crate's
	@# build, and the tests' binaries keep their symbols for backtraces.
	strip --strip-all $(STATIC_OUT)/nad-service-controller $(STATIC_OUT)/nad-network-prober
	@echo "built $(STATIC_OUT)/nad-service-controller and $(STATIC_OUT)/nad-network-prober"

.PHONY: test
test: wasm-target ## Run every test: unit, plugin, integration, RBAC and manifests (starts the local control plane)
	CARGO="$(CARGO)" hack/test.sh

.PHONY: test-faults
test-faults: wasm-target ## Fault tests: API server and etcd killed, paused, compacted; controller killed; bad input (own control plane)
	CARGO="$(CARGO)" hack/test-faults.sh

.PHONY: bench
bench: wasm-target ## Benchmarks (plugin boundary; controller at scale on the local control plane) to BENCHMARKS.md
	CARGO="$(CARGO)" hack/bench.sh

.PHONY: bench-scale
bench-scale: wasm-target ## The scalability envelope: 150 000 pods, 10 000 Services on the local control plane (~20 min) to BENCHMARKS.md
	CARGO="$(CARGO)" hack/bench-scale.sh

.PHONY: test-unit
test-unit: wasm-target ## Run the tests that need no control plane
	$(CARGO) test --release --locked --workspace --lib --bins
	$(CARGO) test --release --locked --workspace --test plugins -- runtime::

.PHONY: demo
demo: ## The main job end to end on the local control plane (DEMO_ONESHOT=1: check and exit)
	CARGO="$(CARGO)" hack/demo.sh

.PHONY: local-up
local-up: ## Start the local control plane (built from source on first use) and print KUBECONFIG
	@hack/local-up.sh

.PHONY: local-down
local-down: ## Stop the local control plane and remove its state
	@hack/local-down.sh

.PHONY: lint
lint: lint-packages lint-rust lint-workflows deny ## All linters: lint-rust, lint-workflows, deny (after the packages they need)

.PHONY: lint-packages
lint-packages: ## Install what the linters need and is missing: shellcheck, PyYAML, rustfmt, clippy (hack/system-packages.sh lint)
	hack/system-packages.sh lint

.PHONY: lint-rust
lint-rust: wasm-target ## cargo fmt --check, the crates' floors (hack/check-layers.py), their module graphs (hack/module-graph.py: no circles, no arrows back up) and clippy (host and wasm32 guests) with warnings as errors
	$(CARGO) fmt --all -- --check
	python3 hack/check-layers.py
	python3 hack/module-graph.py
	@# The release build's target and flags: the build scripts and proc macros it compiles and
	@# runs (aws-lc's C library among them) are the build's, compiled once for both.
	CARGO="$(CARGO)" hack/static-cargo.sh clippy --release --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --target $(WASM_TARGET) -p nad-plugin-sdk -p nad-default-plugin -p nad-plugin-opt-out -p nad-plugin-preferred-zones -p nad-test-misbehaving -p nad-test-contract-1-0 -p nad-test-stale-wit -p nad-test-imports-filesystem -- -D warnings

.PHONY: lint-workflows
lint-workflows: ## Lint .github/workflows: actionlint (with shellcheck, if installed), SHA pins, permissions, timeouts
	"$$(hack/tools.sh actionlint)" -color=false
	python3 hack/check-workflows.py

.PHONY: deny
deny: ## cargo deny: licences, bans, sources (and advisories with DENY_ADVISORIES=1; needs github.com)
	"$$(hack/tools.sh cargo-deny)" check licenses bans sources $(if $(DENY_ADVISORIES),advisories)

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: run
run: build ## Run the controller against the current kubeconfig (RUN_ARGS=... for flags)
	$(BIN) $(RUN_ARGS)

.PHONY: release-manifest
release-manifest: ## Render deploy/overlays/default to $(RELEASE_MANIFEST) (RELEASE_IMAGE=repo:tag for a release)
	hack/manifests.sh render $(RELEASE_IMAGE) > $(RELEASE_MANIFEST).tmp
	mv $(RELEASE_MANIFEST).tmp $(RELEASE_MANIFEST)
	@echo "wrote $(RELEASE_MANIFEST)"

.PHONY: helm-check
helm-check: ## The Helm chart: lint, defaults equal deploy/deploy.yaml, server-side dry runs (needs KUBECONFIG: make local-up)
	hack/helm.sh check

.PHONY: helm-template
helm-template: ## Render the Helm chart (HELM_ARGS=... for values)
	@hack/helm.sh template $(HELM_ARGS)

.PHONY: check-monitoring
check-monitoring: ## Alert rules, their promtool unit tests and the dashboard's queries (deploy/monitoring/)
	hack/monitoring.sh check

.PHONY: deploy-plugins
deploy-plugins: wasm-target ## Build the example plugin into deploy/overlays/with-plugins/plugins/
	CARGO="$(CARGO)" hack/manifests.sh plugins

.PHONY: plugin-push
plugin-push: $(if $(wildcard $(BIN)),,build) ## Publish a plugin to a registry: PLUGIN=<file.wasm> REF=oci://<registry>/<repo>[:<tag>] (prints the @sha256 reference to pin)
	@[[ -n "$(PLUGIN)" && -n "$(REF)" ]] || { echo "usage: make plugin-push PLUGIN=<file.wasm> REF=oci://<registry>/<repository>[:<tag>] [PUSH_ARGS=--plugin-registry-http=<host:port>]" >&2; exit 2; }
	$(BIN) plugin push $(PLUGIN) $(REF) $(PUSH_ARGS)

.PHONY: image-oci
image-oci: build-static ## The images as OCI layouts in $(IMAGE_LAYOUT) and $(PROBER_IMAGE_LAYOUT), without a container engine (Debian's umoci); prints their digests
	@hack/image-oci.sh $(STATIC_OUT)/nad-service-controller $(IMAGE_LAYOUT) $(IMAGE_TAG)
	@hack/image-oci.sh $(STATIC_OUT)/nad-network-prober $(PROBER_IMAGE_LAYOUT) $(IMAGE_TAG)

.PHONY: image-local
image-local: ## Build the images for this machine into the local container engine (IMAGE=..., PROBER_IMAGE=...)
	IMAGE="$(IMAGE)" PROBER_IMAGE="$(PROBER_IMAGE)" hack/image.sh local

.PHONY: image
image: ## Build the linux/amd64 and linux/arm64 images and push them to $(IMAGE_REPO) and $(PROBER_IMAGE_REPO) (IMAGE=..., PROBER_IMAGE=...)
	IMAGE="$(IMAGE)" PROBER_IMAGE="$(PROBER_IMAGE)" hack/image.sh push

.PHONY: cluster
cluster: ## Create a KinD cluster with Multus, whereabouts, macvlan and the macvlan network
	KUBECTL="$(KUBECTL)" hack/kind/cluster.sh

.PHONY: apply-kind
apply-kind: $(if $(filter with-plugins,$(OVERLAY)),deploy-plugins) ## Build the image, load it into KinD and deploy the controller there (OVERLAY=...)
	IMAGE="$(KIND_IMAGE)" PROBER_IMAGE="$(KIND_PROBER_IMAGE)" hack/image.sh local
	"$$(hack/tools.sh kind)" load docker-image "$(KIND_IMAGE)" "$(KIND_PROBER_IMAGE)" --name "$(KIND_CLUSTER_NAME)"
	PROBER_IMAGE="$(KIND_PROBER_IMAGE)" MANIFEST_KUBECTL="$(KUBECTL)" hack/manifests.sh render "$(KIND_IMAGE)" "$(OVERLAY)" \
		| $(KUBECTL) --context "kind-$(KIND_CLUSTER_NAME)" apply -f -
	$(KUBECTL) --context "kind-$(KIND_CLUSTER_NAME)" -n nad-service-controller rollout status deployment/nad-service-controller --timeout=300s

.PHONY: apply
apply: $(if $(filter with-plugins,$(OVERLAY)),deploy-plugins) ## Deploy the controller with $(IMAGE) to the current kubectl context (OVERLAY=...)
	PROBER_IMAGE="$(PROBER_IMAGE)" MANIFEST_KUBECTL="$(KUBECTL)" hack/manifests.sh render "$(IMAGE)" "$(OVERLAY)" | $(KUBECTL) apply -f -

.PHONY: delete
delete: $(if $(filter with-plugins,$(OVERLAY)),deploy-plugins) ## Remove the controller (and its namespace) from the current kubectl context (OVERLAY=...)
	MANIFEST_KUBECTL="$(KUBECTL)" hack/manifests.sh render "$(IMAGE)" "$(OVERLAY)" | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: testdata
testdata: ## Apply testdata/ (the nginx and netutils workloads, the macvlan network) to the default namespace
	$(KUBECTL) apply -n default -f testdata/

.PHONY: e2e-check
e2e-check: ## The quick start's checks on the KinD cluster: slice IPs, and curl from the netutils pods
	KUBECTL="$(KUBECTL)" hack/kind/check.sh

.PHONY: purge
purge: ## Delete the KinD cluster
	"$$(hack/tools.sh kind)" delete cluster --name "$(KIND_CLUSTER_NAME)"

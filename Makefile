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

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

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

.PHONY: test
test: wasm-target ## Run every test: unit, plugin and integration (starts the local control plane)
	CARGO="$(CARGO)" hack/test.sh

.PHONY: test-unit
test-unit: wasm-target ## Run the tests that need no control plane
	$(CARGO) test --release --locked --workspace --lib --bins --test plugin_runtime

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
lint: wasm-target ## cargo fmt --check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --target $(WASM_TARGET) -p nad-default-plugin -p nad-plugin-opt-out -p nad-plugin-preferred-zones -p nad-test-misbehaving -- -D warnings

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: run
run: build ## Run the controller against the current kubeconfig (RUN_ARGS=... for flags)
	$(BIN) $(RUN_ARGS)

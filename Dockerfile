# syntax=docker/dockerfile:1
# The project's two images, each one static binary on an empty base, run as a numeric non-root
# user: the controller (target nad-service-controller, the default: the default plugin is compiled
# into it) and the network prober (target nad-network-prober: no Wasm runtime, no plugin
# fetcher). `make image-local` builds them for this machine, `make image` for linux/amd64 and
# linux/arm64. The build reaches only what the project's builds use anyway:
# Debian packages, crates.io, and rustup for the wasm32-wasip2 and musl targets. Without an
# engine, `make image-oci` assembles the same image from the same `make build-static`, whose
# binary does not depend on the build's paths (/src here).

# Builds natively for the platform being built (no cross-compiling): musl makes it static.
FROM docker.io/library/rust:1.95.0-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends make musl-tools \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    make build-static STATIC_OUT=/out

# The network prober: the DaemonSet of deploy/prober runs it (its flags, no subcommand).
FROM scratch AS nad-network-prober
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/nad-network-prober /nad-network-prober
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/nad-network-prober"]

# The controller (the last stage: what a build without --target gives).
FROM scratch AS nad-service-controller
# The controller trusts the cluster's CA from its ServiceAccount; system roots are for a
# kubeconfig that points elsewhere.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/nad-service-controller /nad-service-controller
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/nad-service-controller"]
CMD ["run"]

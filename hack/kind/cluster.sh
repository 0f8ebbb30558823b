#!/usr/bin/env bash
# A KinD cluster with a real Multus secondary network, for the quick start and the e2e workflow:
#   - kind: one control-plane node and two workers (KIND_CLUSTER_NAME, default nad-service-controller);
#   - Multus (thick plugin), with its NetworkAttachmentDefinition CRD;
#   - whereabouts, the cluster-wide IPAM the macvlan network uses;
#   - the macvlan CNI plugin copied onto every node (kind's node image lacks it);
#   - testdata/00-macvlan-nad.yaml: the "macvlan" network in the default namespace.
# Needs a running Docker engine, kubectl and curl; kind itself is installed by hack/tools.sh (Go).
# Idempotent: an existing cluster of that name is reused.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

CLUSTER="${KIND_CLUSTER_NAME:-nad-service-controller}"
# The image kind v0.33.0 was released with, by digest as its release notes require.
NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5}"
MULTUS_VERSION=v4.2.4
WHEREABOUTS_VERSION=v0.9.4
CNI_PLUGINS_VERSION=v1.9.1
KUBECTL="${KUBECTL:-kubectl}"
step() { printf '\n== %s\n' "$*" >&2; }

for tool in docker "$KUBECTL" curl go; do
  command -v "$tool" >/dev/null || { echo "cluster: $tool is required and not installed" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || {
  echo "cluster: a KinD cluster needs a running Docker engine, and \`docker info\` failed." >&2
  echo "  Without one, \`make demo\` shows the controller on the local control plane instead." >&2
  exit 2
}
kind="$(hack/tools.sh kind)"

step "kind cluster $CLUSTER"
if "$kind" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing the existing cluster" >&2
else
  "$kind" create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --wait 120s --config - <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
YAML
fi
"$KUBECTL" config use-context "kind-$CLUSTER" >/dev/null

step "macvlan CNI plugin $CNI_PLUGINS_VERSION on every node"
for node in $("$kind" get nodes --name "$CLUSTER"); do
  case "$(docker exec "$node" uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) echo "cluster: unsupported node architecture on $node" >&2; exit 1 ;;
  esac
  url="https://github.com/containernetworking/plugins/releases/download/$CNI_PLUGINS_VERSION/cni-plugins-linux-$arch-$CNI_PLUGINS_VERSION.tgz"
  curl -fsSL "$url" | docker exec -i "$node" tar -C /opt/cni/bin -xzf - ./macvlan
  echo "$node: /opt/cni/bin/macvlan" >&2
done

step "Multus $MULTUS_VERSION (thick plugin)"
curl -fsSL "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/$MULTUS_VERSION/deployments/multus-daemonset-thick.yml" \
  | sed "s#multus-cni:snapshot-thick#multus-cni:$MULTUS_VERSION-thick#g" \
  | "$KUBECTL" apply -f -
# The upstream 50Mi limit gets the thick daemon OOM-killed under load; give it room.
"$KUBECTL" -n kube-system set resources daemonset/kube-multus-ds -c kube-multus --limits=memory=300Mi
"$KUBECTL" -n kube-system rollout status daemonset/kube-multus-ds --timeout=300s

step "whereabouts $WHEREABOUTS_VERSION"
base="https://raw.githubusercontent.com/k8snetworkplumbingwg/whereabouts/$WHEREABOUTS_VERSION/doc/crds"
for crd in ippools overlappingrangeipreservations nodeslicepools; do
  "$KUBECTL" apply -f "$base/whereabouts.cni.cncf.io_$crd.yaml"
done
curl -fsSL "$base/daemonset-install.yaml" \
  | sed "s#whereabouts:latest#whereabouts:$WHEREABOUTS_VERSION#g" \
  | "$KUBECTL" apply -f -
"$KUBECTL" -n kube-system rollout status daemonset/whereabouts --timeout=300s

step "the macvlan NetworkAttachmentDefinition"
"$KUBECTL" wait --for=condition=Established --timeout=60s crd/network-attachment-definitions.k8s.cni.cncf.io
"$KUBECTL" apply -n default -f testdata/00-macvlan-nad.yaml

step "ready: kubectl context kind-$CLUSTER; next: make apply-kind, then make testdata"

#!/usr/bin/env bash
# The main job end to end: the controller publishes the nginx-nad Service's pods' macvlan IPs,
# and clients on that network reach them by name.
#
# By default on the local control plane (hack/local-up.sh) with real nodes (hack/nodes.sh, as
# root: kubelet, containerd and kube-scheduler, Multus writing network-status, whereabouts,
# kube-proxy, CoreDNS). The controller and the network prober run there as pods, installed as a
# user installs them (deploy/overlays/with-prober, its images built here and loaded into the
# nodes), and the seed's four curls, the IPv6 curls and the prober's link-down run from inside
# the netutils pods. The system packages it needs are installed first (hack/system-packages.sh
# demo). Only where nodes cannot run at all (not root, no overlayfs, no cgroups) does it fall
# back to the node simulator and the controller on this machine (slices only, no traffic): it
# says so before the build and again at its end. DEMO_CLUSTER=existing runs the controller on
# this machine against the cluster in KUBECONFIG instead (a real one, with Multus). DEMO_ONESHOT=1
# exits right after the checks: non-zero after a fallback, unless DEMO_SIMULATOR_OK=1. Each step
# prints its wall time, and the table of them comes at the end.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=hack/steps.sh
source hack/steps.sh
# shellcheck source=hack/proc.sh
source hack/proc.sh
steps_init demo

cluster="${DEMO_CLUSTER:-local}"
oneshot="${DEMO_ONESHOT:-0}"
simulator_ok="${DEMO_SIMULATOR_OK:-0}"
timeout="${DEMO_TIMEOUT:-180}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
logs="$repo/.local/logs"
tag="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
show() { printf '\n%s== %s%s\n' "$steps_bold" "$*" "$steps_plain" >&2; }
die() { echo "demo: error: $*" >&2; exit 1; }

pids=()
controller=""
started_cluster=false
started_nodes=false
cleanup() {
  local status=$?
  background_stop
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "$started_cluster" == true ]]; then
    show "stopping the nodes and the local control plane"
    # After a failure the logs stay, to read (.local/logs).
    NAD_KEEP_LOGS="$((status != 0))" hack/local-down.sh || true
  elif [[ "$started_nodes" == true ]]; then
    show "stopping the nodes"
    NAD_KEEP_LOGS="$((status != 0))" hack/nodes.sh down || true
  fi
  steps_report
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nodes=false
fallback=""
if [[ "$cluster" == local ]]; then
  # Asked before the build, so that a newcomer hears it at once rather than after it.
  fallback="$(hack/nodes.sh preflight 2>&1)" || true
  if [[ -z "$fallback" ]]; then
    nodes=true
  else
    show "NOTE: no nodes on this machine, so no traffic: $fallback. The demo will show the slices, from the node simulator, without the curls."
  fi
fi

step "system packages" "system packages (hack/system-packages.sh demo: installs what is missing)"
hack/system-packages.sh demo

mkdir -p "$logs"
if [[ "$nodes" == true ]]; then
  step "release build" "builds: the control plane and the nodes from Go modules in the background (log: .local/logs/go-builds-demo.log); here the controller's and the prober's images (make image-oci: their static binaries, then umoci; the first build takes minutes)"
  background_start "$logs/go-builds-demo.log" hack/go-builds.sh control-plane data-plane
  image_layout="$target_dir/image/oci" prober_image_layout="$target_dir/image/prober-oci"
  make --no-print-directory image-oci IMAGE_LAYOUT="$image_layout" PROBER_IMAGE_LAYOUT="$prober_image_layout" \
    IMAGE_TAG="$tag" >/dev/null
else
  step "release build" "builds: $([[ "$cluster" == local ]] && echo "the control plane from Go modules in the background (log: .local/logs/go-builds-demo.log), ")the controller and the node simulator here (their static build, hack/static-cargo.sh; the first build takes minutes)"
  [[ "$cluster" == local ]] && background_start "$logs/go-builds-demo.log" hack/go-builds.sh control-plane
  make --no-print-directory wasm-target >&2
  # The same packages and target as hack/test.sh and the images: one build of the dependencies.
  hack/static-cargo.sh build --release --locked -p nad-service-controller -p nad-prober -p node-sim >&2
fi
release_dir="$(hack/static-cargo.sh --release-dir)"
background_wait "go: waiting" "waiting for the Go builds (.local/logs/go-builds-demo.log)" || die "a Go build failed"

if [[ "$cluster" == local ]]; then
  was_up=false
  if [[ -f .local/kubeconfig ]] && .local/bin/kubectl --kubeconfig .local/kubeconfig get --raw /readyz >/dev/null 2>&1; then
    was_up=true
  fi
  step "control plane" "starting the local control plane (etcd, kube-apiserver, kube-controller-manager)"
  # A failed start stops what it started (hack/local-up.sh), so there is nothing to stop until it is up.
  exports="$(step_repeatable "starting the local control plane" "make local-up" hack/local-up.sh)" || exit 1
  eval "$exports"
  [[ "$was_up" == true ]] || started_cluster=true
  export PATH="$repo/.local/bin:$PATH"
else
  [[ -n "${KUBECONFIG:-}" ]] || die "DEMO_CLUSTER=existing needs KUBECONFIG"
fi

# The nodes' own images in place of those a cluster would pull: nginx:1.27 and netshoot, as
# hack/nodes.sh lists them (<state>/nodes/images).
local_image() { awk -v name="/$1:" '$1 == "image" && index($2, name) {print $2; exit}' .local/nodes/images; }
# testdata/'s files as one stream of documents.
testdata() {
  local file
  for file in testdata/*.yaml; do cat "$file"; echo "---"; done \
    | if [[ "$nodes" == true ]]; then sed -e "s|image: nginx:1.27|image: $(local_image nginx)|" \
      -e "s|image: nicolaka/netshoot:v0.13|image: $(local_image netutils)|"
    else cat; fi
}

if [[ "$nodes" == true ]]; then
  step "nodes" "starting the nodes (hack/nodes.sh up: 2 kubelets with containerd, kube-scheduler, Multus, whereabouts, kube-proxy, CoreDNS) and loading the images into them"
  proc_running .local/pids/nodes-relay.pid || started_nodes=true
  step_repeatable "starting the nodes" "hack/nodes.sh up" hack/nodes.sh up || exit 1
  hack/nodes.sh load "$image_layout:$tag" "localhost/isim/nad-service-controller:$tag"
  hack/nodes.sh load "$prober_image_layout:$tag" "localhost/isim/nad-network-prober:$tag"
  show "kubectl get nodes"
  kubectl get nodes -o wide
  # testdata/ first: it defines default/macvlan, which the prober's pods are attached to.
  show "kubectl apply -f testdata/    (images: the nodes' own for nginx:1.27 and nicolaka/netshoot:v0.13)"
  testdata | kubectl apply -f -

  step "install" "the controller and the network prober as pods, installed as a user installs them: deploy/overlays/with-prober, with the images loaded here"
  # The overlay as it is, with kustomize's own image override, as a user points it at a mirror.
  mkdir -p .local/demo
  cat >.local/demo/kustomization.yaml <<EOF
# Written by hack/demo.sh: deploy/overlays/with-prober with the images hack/nodes.sh loaded.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../deploy/overlays/with-prober
images:
  - name: ghcr.io/ihcsim/nad-service-controller
    newName: localhost/isim/nad-service-controller
    newTag: "$tag"
  - name: ghcr.io/ihcsim/nad-network-prober
    newName: localhost/isim/nad-network-prober
    newTag: "$tag"
EOF
  show "kubectl apply -k deploy/overlays/with-prober    (images: localhost/isim/*:$tag, as .local/demo/kustomization.yaml overrides them)"
  kubectl apply -k .local/demo
  kubectl -n nad-service-controller rollout status deploy/nad-service-controller --timeout="${timeout}s" \
    || die "the controller's Deployment did not become ready"
  kubectl -n nad-service-controller rollout status ds/nad-network-prober --timeout="${timeout}s" \
    || die "the network prober did not become ready on both nodes"
  show "kubectl -n nad-service-controller get pods -o wide"
  kubectl -n nad-service-controller get pods -o wide
  step "slices" "the controller publishes testdata/'s pods"
else
  step "slices" "the controller publishes testdata/'s pods: starting it on this machine (log: .local/logs/controller.log)"
  if [[ "$cluster" == local ]]; then
    "$release_dir/node-sim" --range macvlan=192.168.2.0/24 >"$logs/node-sim.log" 2>&1 &
    pids+=($!)
  fi
  "$release_dir/nad-service-controller" --leader-election=false \
    --metrics-address 127.0.0.1:18080 --health-address 127.0.0.1:18081 \
    >"$logs/controller.log" 2>&1 &
  controller=$!
  pids+=("$controller")
  show "kubectl apply -f testdata/"
  testdata | kubectl apply -f -
fi

show "waiting for the nginx-nad EndpointSlice to list both pods (at most ${timeout}s)"
endpoints() {
  kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad \
    -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}{"\n"}{end}' 2>/dev/null | sort
}
pod_ips() {
  kubectl get pods -l app=nginx-nad -o json | python3 -c '
import json, sys
for pod in json.load(sys.stdin)["items"]:
    if pod["metadata"].get("deletionTimestamp"):
        continue
    status = json.loads(pod["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/network-status", "[]"))
    for net in status:
        if net.get("name", "").endswith("/macvlan"):
            print("\n".join(net.get("ips", [])))
' | sort
}
controller_log() {
  if [[ -n "$controller" ]]; then tail -20 "$logs/controller.log"
  else kubectl -n nad-service-controller logs deploy/nad-service-controller --tail=20; fi
}
deadline=$((SECONDS + timeout))
until [[ "$(endpoints | wc -l)" -ge 2 && "$(endpoints)" == "$(pod_ips)" ]]; do
  if [[ -n "$controller" ]] && ! kill -0 "$controller" 2>/dev/null; then
    status=0
    wait "$controller" || status=$?
    proc_log_tail "$logs/controller.log" >&2
    die "the controller exited with status $status (its log: $logs/controller.log)"
  fi
  if ((SECONDS > deadline)); then
    kubectl get pods -o wide >&2 || true
    controller_log >&2 || true
    die "the nginx-nad EndpointSlice did not show both pods' macvlan IPs within ${timeout}s"
  fi
  sleep 1
done

if [[ "$nodes" == true ]]; then
  for app in nginx-basic nginx-nad netutils-base netutils-nad; do
    kubectl rollout status "deploy/$app" --timeout="${timeout}s" >/dev/null || die "deploy/$app did not become ready"
  done
fi

show "kubectl get deploy,svc,po"
kubectl get deploy,svc,po -o wide
show "kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad"
kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad
show "the endpoints' addresses"
kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad -o jsonpath='{.items[*].endpoints[*].addresses}'
echo
show "the nginx-nad pods' k8s.v1.cni.cncf.io/network-status (written by $([[ "$nodes" == true ]] && echo Multus || echo the node simulator))"
kubectl get pods -l app=nginx-nad -o json | python3 -c '
import json, sys
for pod in json.load(sys.stdin)["items"]:
    status = json.loads(pod["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/network-status", "[]"))
    print(pod["metadata"]["name"] + ": " + json.dumps(status, separators=(",", ":")))
'
show "OK: the slice holds exactly the pods' secondary-network IPs"

pod_of() { kubectl get pods -l "app=$1" -o jsonpath='{.items[0].metadata.name}'; }
# records <pod> ahostsv4|ahostsv6: nginx-nad's A or AAAA records as <pod> resolves them, one
# line (ahostsv6 gives A records as ::ffff:a.b.c.d where there is no AAAA: left out).
records() { kubectl exec "$1" -- getent "$2" nginx-nad | awk '$1 !~ /^::ffff:/ {print $1}' | sort -u | xargs; }
failed=0
# curl_from <pod> <service> <want> [-6]
curl_from() {
  local pod="$1" service="$2" want="$3" code out
  local args=(curl ${4:+"$4"} -s -o /dev/null -w "%{http_code}")
  local shown=(curl ${4:+"$4"} -s -o /dev/null -w '"%{http_code}"')
  if [[ "$want" == 000 ]]; then
    args+=(--connect-timeout 10)
    shown+=(--connect-timeout 10)
  fi
  # Shown as the seed's README shows its kubectl exec lines.
  echo "\$ kubectl exec -it $pod -- ${shown[*]} $service"
  code=0
  out="$(kubectl exec "$pod" -- "${args[@]}" "$service" 2>/dev/null)" || code=$?
  if ((code)); then echo "${out}command terminated with exit code $code"; else echo "$out"; fi
  echo
  if [[ "$want" == 000 ]]; then
    [[ "$out" == 000 && "$code" == 28 ]] || { echo "demo: expected 000 and exit code 28" >&2; failed=1; }
  else
    [[ "$out" == "$want" && "$code" == 0 ]] || { echo "demo: expected $want" >&2; failed=1; }
  fi
}

# A process of pod $1's containers, as this machine sees it: one in the pod's cgroup (kubelet
# names it pod<uid>), other than the sandbox's pause.
pod_pid() {
  local uid cgroup pid
  uid="$(kubectl get pod "$1" -o jsonpath='{.metadata.uid}')"
  for cgroup in /proc/[0-9]*/cgroup; do
    pid="${cgroup#/proc/}" pid="${pid%/cgroup}"
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == pause ]] && continue
    if grep -qF "/pod$uid/" "$cgroup" 2>/dev/null; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# The network prober of the install: both nginx-nad pods answer on default/macvlan. Then one
# nginx-nad pod's net1 goes down in its network namespace, from the node (its primary network,
# and so its Ready, untouched): the name resolves to the other pod only, until the link is back.
prober_demo() {
  local condition=network-ready.isim.dev/default.macvlan
  network_ready() {
    kubectl get pods -l app=nginx-nad -o jsonpath="{range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"$condition\")].status}{\"\\n\"}{end}"
  }
  local deadline=$((SECONDS + timeout))
  until [[ "$(network_ready | grep -c ' True$')" == 2 ]]; do
    ((SECONDS < deadline)) || die "the prober did not mark both nginx-nad pods ready on the network"
    sleep 1
  done
  show "kubectl get pods -l app=nginx-nad (the prober's condition: $condition)"
  kubectl get pods -l app=nginx-nad -o custom-columns="NAME:.metadata.name,READY:.status.conditions[?(@.type==\"Ready\")].status,NETWORK-READY:.status.conditions[?(@.type==\"$condition\")].status,MESSAGE:.status.conditions[?(@.type==\"$condition\")].message"
  local nad victim dead dead6 pid
  nad="$(pod_of netutils-nad)"
  victim="$(pod_of nginx-nad)"
  read -r dead dead6 < <(kubectl get pod "$victim" -o json | python3 -c '
import json, sys
pod = json.load(sys.stdin)
for net in json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]):
    if net.get("name", "").endswith("/macvlan"):
        print(" ".join(net["ips"][:2]))')
  pid="$(pod_pid "$victim")" || die "no process of $victim on this machine"
  # A and AAAA records, one line: "192.168.2.4 192.168.2.5 fd00:192:168:2::4 ..."
  resolved() { { records "$nad" ahostsv4; records "$nad" ahostsv6; } | xargs; }
  show "nginx-nad resolves to: $(resolved)"
  show "\$ nsenter -t $pid -n ip link set net1 down    ($victim's secondary link dies, $dead and $dead6; its primary network and Ready untouched)"
  nsenter -t "$pid" -n ip link set net1 down
  local down=$SECONDS
  deadline=$((SECONDS + 30))
  until ! resolved | grep -qwF -e "$dead" -e "$dead6"; do
    ((SECONDS < deadline)) || die "$dead or $dead6 was still in DNS 30 s after its link went down"
    sleep 0.5
  done
  show "after $((SECONDS - down)) s: nginx-nad resolves to $(resolved) only"
  kubectl get pods -l app=nginx-nad -o custom-columns="NAME:.metadata.name,READY:.status.conditions[?(@.type==\"Ready\")].status,NETWORK-READY:.status.conditions[?(@.type==\"$condition\")].status,MESSAGE:.status.conditions[?(@.type==\"$condition\")].message"
  curl_from "$nad" nginx-nad 200
  curl_from "$nad" nginx-nad 200 -6
  ((failed == 0)) || die "nginx-nad did not answer with its other pod"
  show "\$ nsenter -t $pid -n ip link set net1 up"
  nsenter -t "$pid" -n ip link set net1 up
  deadline=$((SECONDS + 30))
  local now
  until now=" $(resolved) " && [[ "$now" == *" $dead "* && "$now" == *" $dead6 "* ]]; do
    ((SECONDS < deadline)) || die "$dead and $dead6 were not both back in DNS 30 s after its link came up"
    sleep 0.5
  done
  show "OK: the link is back, and nginx-nad resolves to $(resolved) again"
}

# A Service on a DRA network: testdata/dra/ (DeviceClass dra-lan, a claim template, netutils-dra
# and its Service annotated isim.dev/device-class: dra-lan, a client on the DRA LAN). Each pod's
# claim is allocated a NIC of DRANET's on its node by kube-scheduler, and DRANET moves the NIC into
# the pod and writes the claim's networkData; the controller publishes those addresses. Then one
# device's claim reports Ready=False (as a driver that saw its link go down would; DRANET itself
# does not report a link's state): the name resolves to the other pod only, until it is Ready.
dra_demo() {
  show "kubectl apply -f testdata/dra/    (image: the nodes' own for nicolaka/netshoot:v0.13)"
  local file
  for file in testdata/dra/*.yaml; do
    sed "s|image: nicolaka/netshoot:v0.13|image: $(local_image netutils)|" "$file"
    echo ---
  done | kubectl apply -f -
  kubectl rollout status deploy/netutils-dra --timeout="${timeout}s" >/dev/null
  kubectl rollout status deploy/netutils-dra-client --timeout="${timeout}s" >/dev/null
  show "kubectl get resourceclaims    (made from the template by kube-controller-manager, allocated by kube-scheduler, networkData written by DRANET)"
  kubectl get resourceclaims -o custom-columns='CLAIM:.metadata.name,POD:.status.reservedFor[0].name,NODE:.status.allocation.devices.results[0].pool,DEVICE:.status.allocation.devices.results[0].device,INTERFACE:.status.devices[0].networkData.interfaceName,IPS:.status.devices[0].networkData.ips,READY:.status.devices[0].conditions[?(@.type=="Ready")].status'
  local client base nics claims
  client="$(pod_of netutils-dra-client)" base="$(pod_of netutils-base)"
  # "<claim> <address>" of each netutils-dra pod: its claim's NIC, as DRANET reported it.
  claims="$(kubectl get resourceclaims -o json | python3 -c '
import json, sys
for claim in json.load(sys.stdin)["items"]:
    holder = (claim.get("status", {}).get("reservedFor") or [{}])[0].get("name", "")
    if holder.startswith("netutils-dra-") and not holder.startswith("netutils-dra-client-"):
        ips = claim["status"]["devices"][0]["networkData"]["ips"]
        print(claim["metadata"]["name"], ips[0].split("/")[0])')"
  nics="$(awk '{print $2}' <<<"$claims" | sort | xargs)"
  resolved() { kubectl exec "$client" -- getent ahostsv4 netutils-dra | awk '{print $1}' | sort -u | xargs; }
  local deadline=$((SECONDS + 30))
  until [[ -n "$nics" && "$(resolved)" == "$nics" ]]; do
    ((SECONDS < deadline)) || die "netutils-dra did not resolve to the NICs' addresses ($nics) in 30 s: $(resolved)"
    sleep 0.5
  done
  show "netutils-dra resolves to $(resolved): the NICs DRANET moved into its pods"
  curl_from "$client" netutils-dra:8080 200
  curl_from "$base" netutils-dra:8080 000
  ((failed == 0)) || die "the curls to netutils-dra did not answer on the DRA LAN only"
  local claim dead
  read -r claim dead <<<"$claims"
  local ready='[{"op": "test", "path": "/status/devices/0/conditions/0/type", "value": "Ready"},
    {"op": "replace", "path": "/status/devices/0/conditions/0/status", "value": "%s"}]'
  show "\$ kubectl patch resourceclaim $claim --subresource=status    (its device, $dead, reports Ready=False)"
  # shellcheck disable=SC2059 # the format is the patch
  kubectl patch resourceclaim "$claim" --subresource=status --type=json -p "$(printf "$ready" False)" >/dev/null
  local down=$SECONDS
  deadline=$((SECONDS + 30))
  while resolved | grep -qwF "$dead"; do
    ((SECONDS < deadline)) || die "$dead was still in DNS 30 s after its device reported Ready=False"
    sleep 0.5
  done
  show "after $((SECONDS - down)) s: netutils-dra resolves to $(resolved) only"
  curl_from "$client" netutils-dra:8080 200
  ((failed == 0)) || die "netutils-dra did not answer with its other pod"
  # shellcheck disable=SC2059
  kubectl patch resourceclaim "$claim" --subresource=status --type=json -p "$(printf "$ready" True)" >/dev/null
  deadline=$((SECONDS + 30))
  until [[ "$(resolved)" == "$nics" ]]; do
    ((SECONDS < deadline)) || die "$dead was not back in DNS 30 s after its device reported Ready=True"
    sleep 0.5
  done
  show "OK: the device is Ready again, and netutils-dra resolves to $(resolved) again"
}

if [[ "$nodes" == true ]]; then
  step "curls" "the seed's four curls, from inside the netutils pods (kubectl exec)"
  nad="$(pod_of netutils-nad)" base="$(pod_of netutils-base)"
  curl_from "$nad" nginx-nad 200
  curl_from "$nad" nginx-basic 200
  curl_from "$base" nginx-basic 200
  curl_from "$base" nginx-nad 000
  ((failed == 0)) || die "the curls did not answer as in the seed's README"
  show "the same two curls to nginx-nad over IPv6 (its AAAA records: $(records "$nad" ahostsv6))"
  curl_from "$nad" nginx-nad 200 -6
  curl_from "$base" nginx-nad 000 -6
  ((failed == 0)) || die "the curls over IPv6 did not answer as over IPv4"
  show "OK: netutils-nad reaches both Services, over IPv4 and IPv6; netutils-base reaches nginx-basic only (demo took $(steps_duration $((SECONDS - steps_first))))"

  step "prober" "readiness on the network: the network prober on both nodes, attached to default/macvlan"
  prober_demo

  step "dra" "a Service on a DRA network: DRANET's NICs, claimed through a ResourceClaimTemplate, published by their DeviceClass"
  dra_demo
fi

steps_report
if [[ -n "$fallback" ]]; then
  show "NOTE: this was the node simulator, not the nodes, so no curls: $fallback"
fi
if [[ "$oneshot" == 1 ]]; then
  if [[ -n "$fallback" && "$simulator_ok" != 1 ]]; then
    die "DEMO_ONESHOT=1 without the nodes (above): set DEMO_SIMULATOR_OK=1 if the slices alone are enough"
  fi
  exit 0
fi
echo "The demo keeps running (Ctrl-C stops it and tears down what it started)." >&2
echo "Try: kubectl scale deploy nginx-nad --replicas=4; kubectl get endpointslices -w" >&2
if [[ "$nodes" == true ]]; then
  echo "     kubectl exec $(pod_of netutils-nad) -- curl -s nginx-nad" >&2
  kubectl -n nad-service-controller logs -f deploy/nad-service-controller &
  pids+=($!)
  wait
else
  tail -n +1 -f "$logs/controller.log" &
  pids+=($!)
  wait "$controller"
fi

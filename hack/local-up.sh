#!/usr/bin/env bash
# Starts a real, local Kubernetes control plane for development and tests: etcd,
# kube-apiserver and kube-controller-manager (no nodes: hack/nodes.sh adds kubelets and
# kube-scheduler), then installs the NetworkAttachmentDefinition CRD from deploy/crds/. Beside the
# API server runs its egress proxy (nsc-net egress), its way to the nodes' network namespaces.
#
# Progress goes to stderr; the last line on stdout is
#   export KUBECONFIG=<repo>/.local/kubeconfig
# so `eval "$(hack/local-up.sh)"` works. Idempotent: when the recorded processes are running and
# the API server is ready, it only prints that line. Stale state (a dead process) is cleaned up
# and the control plane started afresh. hack/local-down.sh stops it. See hack/README.md.
#
# Environment (defaults in brackets):
#   NAD_ETCD_CLIENT_PORT [23791]  NAD_ETCD_PEER_PORT [23801]
#   NAD_APISERVER_PORT [16443]    NAD_KCM_PORT [16257]
#   NAD_LOCAL_DIR [<repo>/.local]  NAD_BIN_CACHE [${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin]
#   NAD_READY_TIMEOUT [180] seconds to wait for each component
#   KUBECTL [the kubectl built with the control plane]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hack="$repo/hack"
state="${NAD_LOCAL_DIR:-$repo/.local}"
etcd_client_port="${NAD_ETCD_CLIENT_PORT:-23791}"
etcd_peer_port="${NAD_ETCD_PEER_PORT:-23801}"
apiserver_port="${NAD_APISERVER_PORT:-16443}"
kcm_port="${NAD_KCM_PORT:-16257}"
ready_timeout="${NAD_READY_TIMEOUT:-180}"
service_cidrs="10.96.0.0/16,fd00:10:96::/112"
# The API server's advertised address, so the `kubernetes` Service's endpoint (its own endpoint
# reconciler publishes <address>:<port>): the nodes' LAN bridge, where hack/nodes.sh relays it to
# 127.0.0.1 (nsc-net relay). It listens on 127.0.0.1 only.
advertise_address=172.30.0.1

pki="$state/pki"
logs="$state/logs"
pids="$state/pids"
kubeconfig="$state/kubeconfig"
kcm_kubeconfig="$state/kube-controller-manager.kubeconfig"
crd_name="network-attachment-definitions.k8s.cni.cncf.io"

log() { echo "local-up: $*" >&2; }
die() { echo "local-up: error: $*" >&2; exit 1; }

for tool in openssl curl; do
  command -v "$tool" >/dev/null || die "$tool is required (apt-get install $tool)"
done

mkdir -p "$state"
if command -v flock >/dev/null; then
  # Serialise concurrent runs (e.g. two test suites starting at once).
  exec 9>>"$state/lock"
  flock -w 1200 9 || die "another local-up.sh/local-down.sh has held $state/lock for 20 min"
fi
export NAD_LOCK_HELD=1

# --- helpers -------------------------------------------------------------------------------------

# shellcheck source=hack/proc.sh
source "$hack/proc.sh"
# shellcheck source=hack/pki.sh
source "$hack/pki.sh"

# True if component $1, as recorded when it was started, is still running.
running() { proc_running "$pids/$1.pid"; }

# What the last health check of wait_for got, for the message when none passes.
answer=""

# http_check URL BODY [CURL-ARG...]: true when URL answers 200 with BODY in it; sets answer.
http_check() {
  local url="$1" want="$2" out code body failed
  shift 2
  out="$(curl -sS --max-time 5 -w '\n%{http_code}' "$@" "$url" 2>&1)" || true
  code="${out##*$'\n'}"
  body="${out%$'\n'*}"
  if [[ "$code" == 000 ]]; then
    answer="no answer from $url: ${body:-curl failed}"
    return 1
  fi
  # A health endpoint that is not ok lists its failed checks as "[-]<check> failed: ...".
  failed="$(grep '^\[-\]' <<<"$body" | head -n 5 | tr '\n' ' ')" || true
  answer="HTTP $code from $url: ${failed:-$(head -c 300 <<<"$body" | tr '\n' ' ')}"
  [[ "$code" == 200 && "$body" == *"$want"* ]]
}

apiserver_ready() {
  http_check "https://127.0.0.1:$apiserver_port/readyz" ok \
    --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

print_export() {
  # kubectl built with the control plane, for convenience: PATH="$PWD/.local/bin:$PATH".
  echo "export KUBECONFIG=$kubeconfig"
}

# Starts component $1 in its own session (so it outlives this script), logging to .local/logs,
# and records its pid and start time (hack/proc.sh), by which it is known from then on.
start() {
  local name="$1"
  shift
  log "starting $name (log: $logs/$name.log)"
  proc_start "$pids/$name.pid" "$logs/$name.log" "$@"
}

# A start that failed: says what was seen, stops what this run started (hack/local-down.sh, the
# logs kept), names the command that repeats this step alone, and exits 1.
failed_start() {
  echo "local-up: error: $1" >&2
  [[ -z "${2:-}" ]] || proc_log_tail "$2" >&2
  log "stopping what this run started; the logs stay in $logs/"
  trap - EXIT
  NAD_KEEP_LOGS=1 "$hack/local-down.sh" || log "could not stop everything (above)"
  log "to repeat this step alone: make local-up (hack/local-up.sh); nothing is rebuilt"
  exit 1
}

# Waits until check "$@" succeeds, for component $1's sake: fails at once if the component
# exits (with its exit status and its log), or at the deadline with the check's last answer.
wait_for() {
  local name="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + ready_timeout))
  answer=""
  until "$@"; do
    if ! running "$name"; then
      proc_exited "$pids/$name.pid"
      failed_start "$name $proc_how while waiting for $what" "$logs/$name.log"
    fi
    if ((SECONDS >= deadline)); then
      failed_start "$name is running (pid $(proc_pid "$pids/$name.pid")) but still waiting for \
$what after ${ready_timeout}s; the last answer: ${answer:-none}" "$logs/$name.log"
    fi
    sleep 0.5
  done
}

# --- already up? ---------------------------------------------------------------------------------

if running etcd && running nsc-net-egress && running kube-apiserver && running kube-controller-manager \
  && [[ -s "$kubeconfig" ]] && apiserver_ready; then
  log "already running (API server https://127.0.0.1:$apiserver_port)"
  print_export
  exit 0
fi

if [[ -d "$pids" || -d "$pki" || -d "$state/etcd" ]]; then
  log "found stale state in $state; cleaning up and starting afresh"
  "$hack/local-down.sh"
fi

# --- binaries ------------------------------------------------------------------------------------

declare -A bin
while read -r name path; do bin[$name]="$path"; done < <(NAD_BIN_CACHE="${NAD_BIN_CACHE:-}" "$hack/controlplane/build.sh")
for name in etcd kube-apiserver kube-controller-manager kubectl nsc-net; do
  [[ -x "${bin[$name]:-}" ]] || die "no $name binary after building"
done
kubectl="${KUBECTL:-${bin[kubectl]}}"

for port in "$etcd_client_port" "$etcd_peer_port" "$apiserver_port" "$kcm_port"; do
  port_in_use "$port" && die "port $port on 127.0.0.1 is already in use (another control plane? \
see the NAD_*_PORT variables in $hack/local-up.sh)"
done

# From here on, a failure stops what this run started and removes its state.
trap 'failed_start "stopped with exit status $? (the messages above say why)"' EXIT
mkdir -p "$pki" "$logs" "$pids" "$state/etcd" "$state/bin" "$state/kube-controller-manager/volume-plugins"
chmod 700 "$state/etcd" "$pki"
ln -sfn "${bin[kubectl]}" "$state/bin/kubectl"
printf 'etcd_client=%s\netcd_peer=%s\napiserver=%s\nkube_controller_manager=%s\n' \
  "$etcd_client_port" "$etcd_peer_port" "$apiserver_port" "$kcm_port" >"$state/ports"

# --- PKI -----------------------------------------------------------------------------------------

log "generating certificates in $pki"
(
  cd "$pki"
  umask 077
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=nad-local-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null

  sign() { pki_sign . "$@"; }
  sign apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:::1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
  sign kube-controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
  sign kube-scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
  # The API server's identity towards kubelets (exec, logs, port-forward): bound to the
  # system:kubelet-api-admin role below, nothing more.
  sign apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"

  # Service-account token signing key pair.
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 644 ca.crt apiserver.crt admin.crt kube-controller-manager.crt kube-scheduler.crt sa.pub
)

# write_kubeconfig FILE USER CERT KEY
write_kubeconfig() {
  pki_kubeconfig "$1" "https://127.0.0.1:$apiserver_port" "$pki/ca.crt" "$2" "$3" "$4"
}
write_kubeconfig "$kcm_kubeconfig" system:kube-controller-manager \
  "$pki/kube-controller-manager.crt" "$pki/kube-controller-manager.key"
write_kubeconfig "$state/kube-scheduler.kubeconfig" system:kube-scheduler \
  "$pki/kube-scheduler.crt" "$pki/kube-scheduler.key"

# --- etcd ----------------------------------------------------------------------------------------

etcd_url="http://127.0.0.1:$etcd_client_port"
start etcd "${bin[etcd]}" \
  --name=nad-local \
  --data-dir="$state/etcd" \
  --listen-client-urls="$etcd_url" \
  --advertise-client-urls="$etcd_url" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster="nad-local=http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster-state=new \
  --unsafe-no-fsync=true \
  --log-level=warn
etcd_healthy() { http_check "$etcd_url/health" '"health":"true"'; }
wait_for etcd "etcd to become healthy" etcd_healthy

# --- the API server's egress ---------------------------------------------------------------------
# The API server listens on the machine's loopback and has no route to the nodes (hack/nodes.sh:
# network namespaces of their own). Its connections to the cluster (kubelets, pods, Services, and
# webhooks) go through an HTTP CONNECT proxy on a Unix socket, as through konnectivity on a
# cluster whose control plane cannot route to its nodes: nsc-net dials the nodes' LAN and the
# pods' ranges inside the LAN's namespace, anything else (a webhook on loopback) from here.

egress_socket="$state/egress.sock"
cat >"$state/egress-selector.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $egress_socket
EOF
start nsc-net-egress "${bin[nsc-net]}" egress "$egress_socket" nsc-lan \
  172.30.0.0/24 fd00:172:30::/64 10.244.0.0/16 fd00:10:244::/56 10.96.0.0/16 fd00:10:96::/112
egress_listening() { [[ -S "$egress_socket" ]] || { answer="no socket $egress_socket yet"; return 1; }; }
wait_for nsc-net-egress "its socket" egress_listening

# --- kube-apiserver ------------------------------------------------------------------------------

start kube-apiserver "${bin[kube-apiserver]}" \
  --etcd-servers="$etcd_url" \
  --bind-address=127.0.0.1 \
  --advertise-address="$advertise_address" \
  --secure-port="$apiserver_port" \
  --tls-cert-file="$pki/apiserver.crt" \
  --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" \
  --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction \
  --egress-selector-config-file="$state/egress-selector.yaml" \
  --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$pki/ca.crt" \
  --kubelet-preferred-address-types=InternalIP \
  --service-cluster-ip-range="$service_cidrs" \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$pki/sa.pub" \
  --service-account-signing-key-file="$pki/sa.key" \
  --allow-privileged=true \
  --profiling=false
wait_for kube-apiserver "the API server's /readyz" apiserver_ready
write_kubeconfig "$kubeconfig" admin "$pki/admin.crt" "$pki/admin.key"

# --- kube-controller-manager ---------------------------------------------------------------------
# No --authentication/--authorization-kubeconfig: delegated auth would need the API server's
# front-proxy (requestheader) CA, and only /healthz (always allowed) is used on this port.
# --flex-volume-plugin-dir keeps it from creating /usr/libexec/kubernetes.

start kube-controller-manager "${bin[kube-controller-manager]}" \
  --kubeconfig="$kcm_kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$kcm_port" \
  --cert-dir="$pki/kube-controller-manager-serving" \
  --flex-volume-plugin-dir="$state/kube-controller-manager/volume-plugins" \
  --controllers='*' \
  --service-account-private-key-file="$pki/sa.key" \
  --root-ca-file="$pki/ca.crt" \
  --use-service-account-credentials=true \
  --leader-elect=false \
  --service-cluster-ip-range="$service_cidrs" \
  --cluster-signing-cert-file="$pki/ca.crt" \
  --cluster-signing-key-file="$pki/ca.key" \
  --profiling=false
kcm_healthy() { http_check "https://127.0.0.1:$kcm_port/healthz" ok -k; }
wait_for kube-controller-manager "the controller manager's /healthz" kcm_healthy

# --- cluster contents ----------------------------------------------------------------------------

export KUBECONFIG="$kubeconfig"
log "installing the NetworkAttachmentDefinition CRD"
"$kubectl" apply -f "$repo/deploy/crds/" >&2
"$kubectl" wait --for=condition=Established --timeout="${ready_timeout}s" "crd/$crd_name" >&2
"$kubectl" create clusterrolebinding kube-apiserver-kubelet-client --clusterrole=system:kubelet-api-admin \
  --user=kube-apiserver-kubelet-client --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
sa_ready() { answer="$("$kubectl" get serviceaccount default --namespace default -o name 2>&1)"; }
wait_for kube-controller-manager "the default service account" sa_ready

trap - EXIT
log "ready: API server https://127.0.0.1:$apiserver_port (kubectl: $state/bin/kubectl)"
print_export

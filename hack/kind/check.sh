#!/usr/bin/env bash
# The quick start's checks, on a cluster with Multus (make cluster), the controller deployed
# (make apply-kind) and testdata/ applied (make testdata), in the default namespace:
#   1. the controller's pods are Ready;
#   2. the nginx-nad EndpointSlice holds exactly the nginx-nad pods' macvlan IPs, all ready;
#   3. a netutils-nad pod reaches nginx-nad (HTTP 200), and nginx-basic;
#   4. a netutils-base pod reaches nginx-basic, but nginx-nad times out (curl exit 28).
# Needs kubectl and jq. Exits non-zero at the first failed check.
set -euo pipefail
KUBECTL="${KUBECTL:-kubectl}"
TIMEOUT="${CHECK_TIMEOUT:-300}"
ok() { echo "check: ok: $*" >&2; }
fail() { echo "check: FAIL: $*" >&2; exit 1; }
command -v jq >/dev/null || fail "jq is required"

"$KUBECTL" -n nad-service-controller wait --for=condition=Ready pod \
  -l app.kubernetes.io/name=nad-service-controller --timeout="${TIMEOUT}s"
ok "the controller's pods are Ready"
for deploy in nginx-basic nginx-nad netutils-base netutils-nad; do
  "$KUBECTL" rollout status "deployment/$deploy" --timeout="${TIMEOUT}s"
done

# The pods' addresses on default/macvlan, as Multus reports them.
pod_ips() {
  "$KUBECTL" get pods -l app=nginx-nad -o json | jq -r '
    .items[] | select(.metadata.deletionTimestamp == null)
    | .metadata.annotations["k8s.v1.cni.cncf.io/network-status"] // "[]" | fromjson
    | .[] | select(.name == "default/macvlan") | .ips[]' | sort
}
slice_ips() {
  "$KUBECTL" get endpointslices -l kubernetes.io/service-name=nginx-nad -o json | jq -r '
    .items[].endpoints[]? | select(.conditions.ready == true) | .addresses[]' | sort
}
deadline=$((SECONDS + 60))
until want="$(pod_ips)" && [[ -n "$want" ]] && [[ "$(slice_ips)" == "$want" ]]; do
  if ((SECONDS > deadline)); then
    "$KUBECTL" get endpointslices -l kubernetes.io/service-name=nginx-nad -o yaml >&2
    fail "the nginx-nad slice holds [$(slice_ips | xargs)], the pods' macvlan IPs are [$(pod_ips | xargs)]"
  fi
  sleep 2
done
ok "the nginx-nad slice holds the pods' macvlan IPs: $(xargs <<<"$want")"

# HTTP status of `curl <service>` from a pod of deployment $1; "000" when it cannot connect.
http_code() {
  "$KUBECTL" exec "deployment/$1" -- curl -s -o /dev/null -w '%{http_code}' --connect-timeout 10 "$2" || true
}
expect_200() {
  local code deadline=$((SECONDS + 60))
  until code="$(http_code "$1" "$2")" && [[ "$code" == 200 ]]; do
    ((SECONDS < deadline)) || fail "curl $2 from $1 answered ${code:-nothing}, not 200"
    sleep 3
  done
  ok "curl $2 from $1: 200"
}
expect_200 netutils-nad nginx-nad
expect_200 netutils-nad nginx-basic
expect_200 netutils-base nginx-basic

if "$KUBECTL" exec deployment/netutils-base -- curl -s -o /dev/null --connect-timeout 10 nginx-nad; then
  fail "curl nginx-nad from netutils-base connected; it has no interface on the macvlan network"
else
  status=$?
  [[ "$status" == 28 ]] || fail "curl nginx-nad from netutils-base failed with exit $status, not 28 (timeout)"
fi
ok "curl nginx-nad from netutils-base: timed out (exit 28), as it should"

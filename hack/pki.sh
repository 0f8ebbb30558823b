# Sourced by hack/local-up.sh (the control plane's certificates and kubeconfigs) and
# hack/nodes.sh (each node's): one way to sign a certificate by the local CA and one way to
# write a kubeconfig.
#
#   pki_sign CA_DIR NAME SUBJECT EXTENSIONS
#       NAME.key and NAME.crt in the current directory, signed by CA_DIR/ca.{crt,key} for a
#       year (EXTENSIONS: extendedKeyUsage and subjectAltName lines, as openssl's -extfile)
#   pki_kubeconfig FILE SERVER CA USER CERT KEY
#       FILE (mode 600): USER at SERVER, the certificates embedded
# shellcheck shell=bash

pki_sign() {
  local ca="$1" name="$2" subject="$3" extensions="$4"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subject" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "$extensions" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
    -CAserial "$name.srl" -days 365 -sha256 -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext" "$name.srl"
}

pki_kubeconfig() {
  local file="$1" server="$2" ca="$3" user="$4" cert="$5" key="$6" b64="base64 -w0"
  (
    umask 077
    cat >"$file" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: nad-local
  cluster:
    server: $server
    certificate-authority-data: $($b64 <"$ca")
users:
- name: $user
  user:
    client-certificate-data: $($b64 <"$cert")
    client-key-data: $($b64 <"$key")
contexts:
- name: nad-local
  context:
    cluster: nad-local
    user: $user
current-context: nad-local
KUBECONFIG
  )
}

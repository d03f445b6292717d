#!/usr/bin/env bash
# Mutual TLS: a throwaway CA signs a server and a client certificate; posenc-server with
# --tls_cert/--tls_key/--tls_client_ca accepts the client that presents its certificate and
# refuses one that does not, and refuses plaintext; on gRPC and on the HTTP/REST binding.
# Usage: tls_test.sh BUILD_DIR
set -euo pipefail
build=${1:?build dir}
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=posenc test CA" \
  -keyout ca.key -out ca.pem 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout $who.key -out $who.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >$who.ext
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
    -extfile $who.ext -out $who.pem 2>/dev/null
done

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen=127.0.0.1:0 --threads=1 \
  --tls_cert=server.pem --tls_key=server.key --tls_client_ca=ca.pem >out 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening out && break; sleep 0.1; done
port=$(sed -E 's/.*grpc=[^ ]*:([0-9]+).*/\1/' <<<"$(grep listening out)")
cli() { "$build/client/posenc-client" "$1" --target="127.0.0.1:$port" --timeout=5s "${@:2}"; }

cli list --tls-ca=ca.pem --tls-cert=client.pem --tls-key=client.key | grep -q sinusoidal \
  || fail "mutual TLS client was refused"
cli encode --shape=1,4,8 --tls-ca=ca.pem --tls-cert=client.pem --tls-key=client.key >/dev/null \
  || fail "encode over mutual TLS"
if cli list --tls-ca=ca.pem >/dev/null 2>&1; then fail "a client without a certificate got in"; fi
if cli list >/dev/null 2>&1; then fail "a plaintext client got in"; fi
# The HTTP/REST binding with the same flags.
hport=$(sed -E 's/.*http=[^ ]*:([0-9]+).*/\1/' <<<"$(grep listening out)")
url="https://127.0.0.1:$hport"
code=$(curl -sS -o body -w '%{http_code}' --cacert ca.pem --cert client.pem --key client.key \
  -X POST "$url/v2/models/sinusoidal/infer" \
  -d '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,1,2],"data":[0,0]}]}') \
  || fail "HTTP infer over mutual TLS"
[ "$code" = 200 ] && grep -q '"data":\[0,1\]' body || fail "HTTP infer over mutual TLS: $code $(cat body)"
if curl -sS -o /dev/null --cacert ca.pem "$url/v2/health/ready" 2>/dev/null; then
  fail "an HTTP client without a certificate got in"
fi
if curl -sS -o /dev/null "http://127.0.0.1:$hport/v2/health/ready" 2>/dev/null; then
  fail "a plaintext HTTP client got in"
fi
echo "PASS: mutual TLS accepts the signed client and refuses the others"

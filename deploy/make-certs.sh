#!/bin/sh
# A local CA, the deployment's service certificate, client certificates and bearer tokens
# for Mirrorline's gRPC APIs (used by `make certs`, docker compose and Kubernetes).
#
#   deploy/make-certs.sh [DIR]           (default .mirrorline/certs)
#   CERT_HOSTS="DNS:mirrorline.example.com,IP:10.0.0.5" deploy/make-certs.sh DIR
#   CERT_KEY_MODE=644 deploy/make-certs.sh DIR   (keys readable by a container's user)
#
# Writes into DIR:
#   ca.pem, ca.key                         the CA (keep ca.key offline in production)
#   service.pem, service.key               CN=mirrorline-service: every service's server
#                                          and client certificate (mTLS between services)
#   admin|operator|viewer.pem, .key        client certificates for people (CN = the role)
#   admin|operator|viewer|service.token    bearer tokens (secret)
#   tokens.txt                             mirrorline.admin.tokens.file: names, roles,
#                                          token hashes and certificate identities
# Existing files are kept, so running it again only fills in what is missing.
set -eu
DIR=${1:-.mirrorline/certs}
DAYS=${CERT_DAYS:-825}
HOSTS="DNS:mirrorline-service,DNS:localhost,IP:127.0.0.1,IP:::1,DNS:controller,DNS:checkpointer,DNS:configsync,DNS:replicator-0,DNS:replicator-1,DNS:spark-executor,DNS:heartbeat,DNS:mirrorline-controller,DNS:mirrorline-checkpointer,DNS:mirrorline-configsync,DNS:mirrorline-heartbeat,DNS:mirrorline-spark-executor,DNS:*.mirrorline-replicator,DNS:*.mirrorline.svc,DNS:*.mirrorline.svc.cluster.local${CERT_HOSTS:+,$CERT_HOSTS}"
mkdir -p "$DIR"
umask 077
cd "$DIR"

if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days "$DAYS" \
    -subj "/CN=mirrorline-local-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

issue() {  # name common-name subject-alt-names
  [ -f "$1.pem" ] && return 0
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s\n' \
    "${3:+subjectAltName=$3}" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" \
    -days "$DAYS" -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue service mirrorline-service "$HOSTS"
for who in admin operator viewer; do issue "$who" "$who" ""; done

for who in admin operator viewer service; do
  [ -f "$who.token" ] || openssl rand -base64 32 | tr '+/' '-_' | tr -d '=\n' > "$who.token"
done
{
  echo "# NAME ROLE CREDENTIAL -- sha256:<hash of a token> or 'cert' (a client certificate's CN)"
  for who in admin operator viewer service; do
    printf '%s-token %s sha256:%s\n' "$who" "$who" \
      "$(openssl dgst -sha256 -r < "$who.token" | cut -d' ' -f1)"
  done
  echo "mirrorline-service service cert"
  for who in admin operator viewer; do echo "$who $who cert"; done
} > tokens.txt
# The secret a standalone Spark cluster (docker compose) shares with the executor's driver.
[ -f spark.secret ] || openssl rand -hex 32 | tr -d '\n' > spark.secret
chmod 644 ca.pem service.pem admin.pem operator.pem viewer.pem tokens.txt
# Containers run as another user than the one who made the files: CERT_KEY_MODE=644 lets
# them read the keys (docker compose on a developer's machine; Kubernetes uses fsGroup).
chmod "${CERT_KEY_MODE:-600}" service.key admin.key operator.key viewer.key *.token spark.secret
echo "certificates and tokens in $DIR"

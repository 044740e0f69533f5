#!/usr/bin/env bash
# Makes the certificates the TLS tests use, in DIR (created if missing), with the openssl
# command line. Valid for two days; EC P-256 keys (fast to make).
#   ca.pem, ca.key            the CA that signs the two below
#   server.pem, server.key    for 127.0.0.1 and localhost (subjectAltName), signed by ca
#   client.pem, client.key    a client certificate, signed by ca (mutual TLS)
#   other-ca.pem              another CA: a client that trusts only it must refuse server.pem
#   other-client.pem, .key    a client certificate signed by other-ca (refused by mutual TLS)
# Usage: make_test_certs.sh DIR
set -euo pipefail
DIR="$1"
mkdir -p "$DIR"
cd "$DIR"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # ca NAME
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=flywheel test $1" -days 2 -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # leaf NAME CA EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=flywheel test $1" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca
ca other-ca
leaf server ca "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client ca "extendedKeyUsage=clientAuth"
leaf other-client other-ca "extendedKeyUsage=clientAuth"
chmod 600 ./*.key

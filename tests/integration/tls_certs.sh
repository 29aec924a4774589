#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tls_certs.sh DIR — make throwaway TLS material for the tests in DIR (created if missing):
#   ca.pem ca.key           a test CA
#   server.pem server.key   signed by it, DNS:localhost (mbed TLS ignores IP subjectAltNames)
#   other-ca.pem            an unrelated CA (a client trusting only it must fail)
#   other.pem other.key     a localhost certificate signed by the unrelated CA
# EC P-256 keys (fast handshakes), valid 2 days, keys mode 0600. Needs openssl.
set -euo pipefail
dir=${1:?usage: tls_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077
ossl() { openssl "$@" 2>/dev/null; }
mkca() { # name subject
    ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=$2" -keyout "$1.key" -out "$1.pem" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
mkcert() { # name ca
    ossl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
        -keyout "$1.key" -out "$1.csr"
    printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$1.ext"
    ossl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
        -extfile "$1.ext" -out "$1.pem"
    rm -f "$1.csr" "$1.ext"
}
mkca ca "meshtrain test CA"
mkca other-ca "unrelated test CA"
mkcert server ca
mkcert other other-ca
chmod 644 ./*.pem
chmod 600 ./*.key

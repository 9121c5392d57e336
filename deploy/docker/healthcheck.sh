#!/bin/bash
# Exit 0 when GET /health on this container's colibri answers 200 (model loaded), 1 otherwise.
# bash's /dev/tcp, because the slim runtime image has no curl or wget.
set -u
exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/${COLIBRI_PORT:-8080}" || exit 1
printf 'GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
IFS= read -r -t 3 status <&3 || exit 1
case "$status" in
    "HTTP/1."?" 200 "*) exit 0 ;;
    *) exit 1 ;;
esac

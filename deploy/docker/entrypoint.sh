#!/bin/sh
# Container entrypoint: `colibri serve` with flags taken from the environment, then any extra
# flags given as the container's command (e.g. `--timeout 300 --max-body 8388608`). A command
# that does not start with "-" runs as is (e.g. `colibri validate /models/model.colibri`).
# exec: colibri becomes PID 1 and gets SIGTERM (drain) and SIGUSR1 (reload) directly.
set -eu
case "${1:-}" in
    "" | -*) ;;
    *) exec "$@" ;;
esac
[ -n "${COLIBRI_CTX:-}" ] && set -- --ctx "$COLIBRI_CTX" "$@"
[ -n "${COLIBRI_QUEUE:-}" ] && set -- --queue "$COLIBRI_QUEUE" "$@"
[ -n "${COLIBRI_PARALLEL:-}" ] && set -- --parallel "$COLIBRI_PARALLEL" "$@"
[ -n "${COLIBRI_THREADS:-}" ] && set -- --threads "$COLIBRI_THREADS" "$@"
[ -n "${COLIBRI_API_KEY_FILE:-}" ] && set -- --api-key-file "$COLIBRI_API_KEY_FILE" "$@"
exec colibri serve --host "${COLIBRI_HOST:-0.0.0.0}" --port "${COLIBRI_PORT:-8080}" "$@"

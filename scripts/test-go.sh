#!/usr/bin/env bash
# The Go binding's suite (go vet + go test -race against the build tree); see go/test.sh.
exec "$(dirname "$0")/../go/test.sh" "$@"

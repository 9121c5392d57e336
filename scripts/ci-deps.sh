#!/usr/bin/env bash
# Native tools the C-side tests (scripts/test-c.sh) need, installed with apt only when missing
# (Debian/Ubuntu; the CI machines run as root, elsewhere sudo is used). Idempotent: on a machine
# that has everything it installs nothing and does not touch the network. Call it from .ci/run
# before scripts/test-c.sh:
#   ./scripts/ci-deps.sh
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have cc || need+=(gcc libc6-dev)          # gcc also brings libasan/libubsan (-fsanitize=address,undefined)
have make || need+=(make)
have cmake || need+=(cmake)
have pkg-config || need+=(pkg-config)     # pkgconf on Debian 12
have valgrind || need+=(valgrind)
have curl || need+=(curl)
have python3 || need+=(python3)           # JSON and .npy checks (standard library only)
have readelf || need+=(binutils)          # readelf, ar, strip
have timeout || need+=(coreutils)

# The sanitizer runtimes come with gcc, but check they link (a gcc without libasan exists).
if [ ${#need[@]} -eq 0 ] && ! echo 'int main(void){return 0;}' |
    cc -x c -fsanitize=address,undefined -o /dev/null - >/dev/null 2>&1; then
    need+=("libgcc-$(cc -dumpversion | cut -d. -f1)-dev") # depends on the matching libasan / libubsan
fi

if [ ${#need[@]} -eq 0 ]; then
    echo "ci-deps: all C test tools present"
    exit 0
fi
echo "ci-deps: installing ${need[*]}"
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"

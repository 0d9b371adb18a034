#!/usr/bin/env bash
# One install step for everything Floe's tests need outside Python (used by
# `make test` - the README's test command - and by .ci/run).
#
#   postgresql  real PostgreSQL server binaries (initdb, pg_ctl) for the metastore tests
#   kcat        librdkafka 2.0 command-line client for the interop tests
#   java, mvn   the Apache Kafka Java client, Kafka Streams and the Kafka broker (Maven Central)
#
# Installs what is missing from Debian's packages (as root, or through sudo),
# says what it installs, and fails with one line per missing tool and the one
# command that installs it when it cannot.
set -uo pipefail

declare -A PKG=(
    [initdb]=postgresql
    [kcat]=kcat
    [java]=openjdk-17-jdk-headless
    [javac]=openjdk-17-jdk-headless
    [mvn]=maven
)

have() {
    case "$1" in
        initdb) command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

missing=()
for tool in initdb kcat java javac mvn; do
    have "$tool" || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0

pkgs=$(for t in "${missing[@]}"; do echo "${PKG[$t]}"; done | sort -u | tr '\n' ' ')
echo "deps: installing ${pkgs}(missing: ${missing[*]})"

sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
fi
if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    # shellcheck disable=SC2086
    if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends $pkgs; } >"$log" 2>&1; then
        tail -n 20 "$log" >&2
    fi
    rm -f "$log"
fi

rc=0
for tool in "${missing[@]}"; do
    if ! have "$tool"; then
        echo "deps: $tool is missing and could not be installed; install it with: sudo apt-get install -y ${PKG[$tool]}" >&2
        rc=1
    fi
done
exit $rc

#!/usr/bin/env bash
# Build UCC from the vendored source release against Debian's UCX, once per
# machine, into a cache outside the clone keyed by version and flags.
# Prints the install prefix on stdout; idempotent (a finished build is reused).
#
#   cpp_ext/ucc/build_ucc.sh [VENDOR_DIR]
#
# P2_CACHE_DIR overrides the cache root (default ~/.cache/p2); P2_BUILD_JOBS the
# make parallelism (default: all cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vendor=${1:-${P2_VENDOR_DIR:-$here/../../../shared/vendor}}
version=1.3.0
archive=$vendor/ucc-$version.tar.gz
flags="--with-ucx=/usr"
key=$(printf '%s %s' "$version" "$flags" | sha256sum | cut -c1-12)
cache=${P2_CACHE_DIR:-$HOME/.cache/p2}
prefix=$cache/ucc-$version-$key

fail() { echo "build_ucc: $*" >&2; exit 1; }

if [ -f "$prefix/.complete" ]; then
    echo "$prefix"
    exit 0
fi
[ -f "$archive" ] || fail "no $archive: the UCC $version source release is expected in ../shared/vendor (or pass its folder)"
for tool in autoconf automake libtoolize make cc; do
    command -v $tool >/dev/null || fail "'$tool' is missing: apt-get install -y autoconf automake libtool build-essential"
done
[ -f /usr/include/ucp/api/ucp.h ] || fail "UCX headers are missing: apt-get install -y libucx-dev"

# One build at a time per prefix (the setup and a test run may start together); a build that
# finished while we waited is reused.
mkdir -p "$cache"
if command -v flock >/dev/null; then
    exec 9>"$cache/ucc-$version-$key.lock"
    flock 9
    if [ -f "$prefix/.complete" ]; then
        echo "$prefix"
        exit 0
    fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/p2-ucc-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$cache/ucc-$version-$key.log
mkdir -p "$cache"
echo "build_ucc: building UCC $version into $prefix (several minutes, once; log in $log)" >&2
{
    tar xzf "$archive" -C "$work"
    cd "$work/ucc-$version"
    ./autogen.sh
    # shellcheck disable=SC2086
    ./configure --prefix="$prefix" $flags
    make -j"${P2_BUILD_JOBS:-$(nproc)}"
    rm -rf "$prefix"
    make install
} > "$log" 2>&1 || { tail -n 20 "$log" >&2; fail "building UCC $version failed; full log in $log"; }
touch "$prefix/.complete"
echo "$prefix"

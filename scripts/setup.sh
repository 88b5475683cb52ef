#!/usr/bin/env bash
# Create .venv/ and install everything the project needs. Idempotent: a second
# run with unchanged pyproject.toml, setup.py, proto/ (the .proto files and their
# generator), C++ sources (cpp_ext/) and this script does nothing. UCC is built
# once per machine into ~/.cache/p2 (P2_CACHE_DIR) from ../shared/vendor;
# P2_SKIP_NATIVE=1 skips UCC and the torch C++ extensions (the enforcer then
# runs its Python group, without UCC).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${P2_PYTHON:-python3}
stamp=.venv/.p2-setup
log=.venv/setup.log
want=$({ echo pyproject.toml scripts/setup.sh setup.py proto/generate_python.py proto/p2/v1/*.proto; find cpp_ext -type f | sort; } \
        | xargs cat | sha256sum | cut -d' ' -f1)
native_ok() {       # the torch extensions are there and load (UCC's library may have left the cache)
    [ "${P2_SKIP_NATIVE:-0}" = 1 ] || TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -c \
        "import enforcer._native, enforcer._ucc" 2>/dev/null
}

vendor=optimizer_service/dashboard/static/vendor
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/p2 ] && native_ok \
        && { [ -f $vendor/uPlot.iife.min.js ] || ! command -v npm >/dev/null; }; then
    exit 0
fi
echo "setup: creating .venv/ and installing dependencies (once; log in $log)" >&2
# System packages: the emulated cluster needs iproute2 (ip, tc) and nsenter
# (util-linux); the service's production store and its tests need redis-server;
# the dashboard's browser tests chromium, its metrics tests prometheus (and
# promtool); its charts come from npm; the deployment tests a one-node Slurm
# (slurm-wlm, munge) and a docker-compose stack (docker.io, docker-compose,
# debootstrap). UCC is built against Debian's UCX with autotools.
missing=()
command -v ip >/dev/null && command -v tc >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
command -v prometheus >/dev/null && command -v promtool >/dev/null || missing+=(prometheus)
command -v npm >/dev/null || missing+=(npm)
# The deployment tests: a real one-node Slurm (tests/support/slurm_cluster.py).
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
# ... and the compose stack (tests/deploy/test_compose.py starts dockerd itself; images from a local
# debootstrap base, deploy/docker/base.sh).
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ "${P2_SKIP_NATIVE:-0}" != 1 ]; then
    [ -f /usr/include/ucp/api/ucp.h ] || missing+=(libucx-dev)
    command -v autoconf >/dev/null && command -v automake >/dev/null || missing+=(autoconf automake)
    command -v libtoolize >/dev/null || missing+=(libtool)
    command -v g++ >/dev/null && command -v make >/dev/null || missing+=(g++ make)
fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing ${missing[*]} with apt-get" >&2
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup: note: ${missing[*]} missing (p2 cluster needs iproute2 and util-linux; the Redis store and its tests need redis-server; the dashboard's tests chromium and prometheus, its charts npm; UCC libucx-dev and autotools)" >&2
    fi
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
: > "$log"
pip() {
    if ! .venv/bin/python -m pip "$@" >> "$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "setup: 'pip $*' failed; full log in $log" >&2
        exit 1
    fi
}
pip install --upgrade pip
# PyTorch first and pinned: this takes the CPU build already on the machine
# instead of downloading gigabytes of CUDA packages.
pip install torch==2.13.0
# The package, editable; its build also generates p2.v1 from proto/ (setup.py).
pip install -e '.[dev]'
# The dashboard's chart library and its API page's Swagger UI, from the npm
# registry (not committed, no CDN at run time; pages work without them).
uplot=1.6.32 swagger=5.35.0
if command -v npm >/dev/null; then
    if npm install --silent --no-save --no-audit --no-fund --prefix .venv/npm "uplot@$uplot" \
            "swagger-ui-dist@$swagger" >> "$log" 2>&1; then
        mkdir -p $vendor
        modules=.venv/npm/node_modules
        cp $modules/uplot/dist/uPlot.iife.min.js $modules/uplot/dist/uPlot.min.css $vendor/
        cp $modules/uplot/LICENSE $vendor/uPlot.LICENSE
        cp $modules/swagger-ui-dist/swagger-ui-bundle.js $modules/swagger-ui-dist/swagger-ui.css $vendor/
        cp $modules/swagger-ui-dist/LICENSE $vendor/swagger-ui.LICENSE
    else
        tail -n 10 "$log" >&2
        echo "setup: 'npm install uplot swagger-ui-dist' failed: the dashboard will show tables without charts" >&2
    fi
fi
# UCC (once per machine, cached outside the clone) and the torch C++ extensions:
# the C++ p2enforcer backend and the UCC bindings (cpp_ext/build_native.py).
if [ "${P2_SKIP_NATIVE:-0}" != 1 ]; then
    ucc=$(cpp_ext/ucc/build_ucc.sh) || { echo "setup: UCC could not be built (above); P2_SKIP_NATIVE=1 goes on without the C++ parts" >&2; exit 1; }
    echo "setup: building the C++ enforcer backend and the UCC bindings (a few minutes when their sources changed)" >&2
    if ! .venv/bin/python cpp_ext/build_native.py --ucc "$ucc" >> "$log" 2>&1; then
        grep '^build_native:' "$log" >&2 || tail -n 20 "$log" >&2
        echo "setup: the torch C++ extensions did not build; full log in $log (P2_SKIP_NATIVE=1 goes on without them)" >&2
        exit 1
    fi
fi
echo "$want" > "$stamp"
echo "setup: done" >&2

#!/usr/bin/env bash
# Build every image of the p2 stack locally (no image registry needed):
#
#   deploy/docker/build.sh          # prints each image's size; logs in build/docker/
#
# 1. p2-base:bookworm, the base of all of them (base.sh: debootstrap; once);
# 2. deploy/docker/inputs/ (git-ignored), what the builds take from this machine:
#    torch 2.13.0's CPU wheel, from pip as scripts/setup.sh gets it
#    (P2_TORCH_WHEEL=FILE: that file), and the CA certificates this machine's pip
#    trusts (its `cert` setting or PIP_CERT; P2_BUILD_CA_FILE: that file), for a
#    TLS-inspecting proxy between the builds and PyPI; both go into the image
#    p2-build-inputs:local, which the images' download stages copy them from (the
#    190 MB wheel stays out of the repository's build context and out of the images);
# 3. p2-service, p2-worker, p2-redis and p2-prometheus, tagged with the
#    project's version (P2_IMAGE_TAG to override), which docker-compose.yml runs.
#
# Docker's layer cache makes a second run take seconds, and a change of Python
# sources only rebuilds the layers after the C++ ones (see the Dockerfiles).
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "build: $*" >&2; exit 1; }
command -v docker >/dev/null || fail "docker is missing (apt-get install docker.io, and start dockerd)"
docker info >/dev/null 2>&1 || fail "no Docker daemon answers (start it: dockerd &)"
# The classic builder: the same with Debian's docker 20.10 CLI and with newer CLIs without buildx.
export DOCKER_BUILDKIT=0

tag=${P2_IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)}
[ -n "$tag" ] || fail "no version in pyproject.toml (set P2_IMAGE_TAG)"
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
logs=build/docker
mkdir -p "$logs"

deploy/docker/base.sh

torch_version=2.13.0
inputs=deploy/docker/inputs
mkdir -p "$inputs/torch-$torch_version"
if ! compgen -G "$inputs/torch-$torch_version/torch-$torch_version*.whl" >/dev/null; then
    if [ -n "${P2_TORCH_WHEEL:-}" ]; then
        cp "$P2_TORCH_WHEEL" "$inputs/torch-$torch_version/"
    else
        # For the images' Python (Debian bookworm's 3.11), whatever Python runs here. pip's own
        # configuration decides where from: on these machines its find-links hold the CPU wheel.
        "${P2_PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --implementation cp \
            --python-version 3.11 --abi cp311 --platform manylinux_2_28_x86_64 -d "$inputs/torch-$torch_version" \
            "torch==$torch_version" || fail "pip download torch==$torch_version failed (P2_TORCH_WHEEL=FILE gives it)"
    fi
fi
wheel=$(compgen -G "$inputs/torch-$torch_version/torch-$torch_version*.whl" | head -n 1)
case $wheel in
    *+cpu*) ;;
    *) echo "build: note: $wheel is not a +cpu build; the worker image carries what it links (CUDA's is large)" >&2 ;;
esac
ca=${P2_BUILD_CA_FILE:-${PIP_CERT:-$("${P2_PYTHON:-python3}" -m pip config get global.cert 2>/dev/null || true)}}
if [ -n "$ca" ]; then
    cp "$ca" "$inputs/pip-ca.pem"
else
    : > "$inputs/pip-ca.pem"        # Debian's certificates alone
fi
# The inputs' image is remade only when they changed (their names, sizes and digest label it).
inputs_id=$(cd "$inputs" && find . -type f -printf '%p %s\n' | sort | cat - pip-ca.pem | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "p2.inputs"}}' p2-build-inputs:local 2>/dev/null)" \
        != "$inputs_id" ]; then
    printf 'FROM scratch\nCOPY . /inputs/\nLABEL p2.build=1 p2.inputs="%s"\n' "$inputs_id" \
        | docker build -t p2-build-inputs:local -f - "$inputs" > "$logs/p2-build-inputs.log" 2>&1 \
        || { tail -n 20 "$logs/p2-build-inputs.log" >&2; fail "the inputs' image did not build (above)"; }
fi

build() {   # build IMAGE DOCKERFILE [STAGE]: from the repository root, logged; one line with its time
    local image=$1 dockerfile=$2 stage=${3:-} started=$SECONDS
    if ! docker build -f "$dockerfile" -t "$image:$tag" --build-arg "VERSION=$tag" --build-arg "REVISION=$revision" \
            . > "$logs/$image.log" 2>&1; then
        tail -n 40 "$logs/$image.log" >&2
        fail "$image did not build (above; the whole log in $logs/$image.log)"
    fi
    # The build stage, tagged (from the cache, at once): it holds the compiled C++ layers the next
    # build reuses, which would otherwise count as leftovers below.
    if [ -n "$stage" ]; then
        docker build -f "$dockerfile" --target "$stage" -t "$image-$stage:cache" . >> "$logs/$image.log" 2>&1 \
            || { tail -n 20 "$logs/$image.log" >&2; fail "$image's $stage stage did not tag (above)"; }
    fi
    echo "build: $image:$tag in $((SECONDS - started)) s" >&2
}
build p2-service deploy/docker/Dockerfile.service build
build p2-worker deploy/docker/Dockerfile.worker build
build p2-redis deploy/docker/Dockerfile.redis
build p2-prometheus deploy/docker/Dockerfile.prometheus
# Leftovers of earlier builds (layers no tagged image uses any more: each change of a C++ source or of
# the pinned requirements leaves a GB or two), and only of p2's builds.
docker image prune -f --filter label=p2.build=1 >/dev/null

for image in p2-service p2-worker p2-redis p2-prometheus; do
    docker image inspect -f '{{.Size}}' "$image:$tag" \
        | awk -v name="$image:$tag" '{printf "build: %-24s %4.0f MB\n", name, $1 / 1e6}' >&2
done

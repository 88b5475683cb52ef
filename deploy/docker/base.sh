#!/usr/bin/env bash
# Make the base image every p2 image starts from, locally: no image registry is
# needed (none is reachable where this project is built). debootstrap installs a
# minimal Debian bookworm from the apt mirror this machine already uses, and
# `docker import` turns that folder into an image.
#
#   deploy/docker/base.sh            # p2-base:bookworm; does nothing if it exists
#
# P2_BASE_IMAGE names another tag; P2_DEBIAN_MIRROR / P2_DEBIAN_SECURITY another
# mirror (default: the first bookworm and bookworm-security URIs in
# /etc/apt/sources.list*). Needs root (debootstrap) and debootstrap.
set -euo pipefail

image=${P2_BASE_IMAGE:-p2-base:bookworm}
if docker image inspect "$image" >/dev/null 2>&1; then
    echo "base: $image exists" >&2
    exit 0
fi
fail() { echo "base: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "debootstrap needs root: run as root, or import a bookworm root filesystem as $image"
command -v debootstrap >/dev/null || fail "debootstrap is missing (apt-get install debootstrap)"

# The URI apt uses for SUITE, from one-line (deb URI SUITE ...) or deb822 (URIs:/Suites:) sources.
apt_uri() {
    local suite=$1 files=() file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] && files+=("$file")
    done
    [ ${#files[@]} -gt 0 ] || return 0
    awk -v suite="$suite" '
        /^deb / { line = $0; gsub(/\[[^]]*\]/, "", line); n = split(line, f, " ")
                  for (i = 3; i <= n; i++) if (f[i] == suite) { print f[2]; exit } }
        tolower($1) == "uris:" { uri = $2 }
        tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) { print uri; exit } }
    ' "${files[@]}"
}
mirror=${P2_DEBIAN_MIRROR:-$(apt_uri bookworm)}
mirror=${mirror:-http://deb.debian.org/debian}
security=${P2_DEBIAN_SECURITY:-$(apt_uri bookworm-security)}
security=${security:-http://deb.debian.org/debian-security}

root=$(mktemp -d "${TMPDIR:-/tmp}/p2-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
echo "base: debootstrap --variant=minbase bookworm from $mirror (about a minute)" >&2
if ! debootstrap --variant=minbase bookworm "$root/fs" "$mirror" > "$root/debootstrap.log" 2>&1; then
    tail -n 20 "$root/debootstrap.log" >&2
    fail "debootstrap failed (above)"
fi

fs=$root/fs
cat > "$fs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
# Small layers: the images' apt-get installs leave no recommended packages, no
# docs, man pages or translations, and no package cache (as Debian's own images).
cat > "$fs/etc/apt/apt.conf.d/90p2-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
cat > "$fs/etc/dpkg/dpkg.cfg.d/90p2-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
# Packages never start services while an image is built.
printf '#!/bin/sh\nexit 101\n' > "$fs/usr/sbin/policy-rc.d"
chmod 755 "$fs/usr/sbin/policy-rc.d"
find "$fs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$fs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$fs"/usr/share/man/* "$fs"/usr/share/info/* "$fs"/usr/share/locale/* \
       "$fs"/var/cache/apt/archives/*.deb "$fs"/var/cache/apt/*.bin "$fs"/var/lib/apt/lists/* \
       "$fs"/var/log/* "$fs"/tmp/* "$fs"/var/tmp/*
# Nothing of this machine in the image: its resolver, name and id (Docker provides its own).
rm -f "$fs/etc/resolv.conf" "$fs/etc/hostname"
: > "$fs/etc/machine-id"

tar --numeric-owner -C "$fs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase bookworm $mirror" - "$image" >/dev/null
echo "base: made $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))" >&2

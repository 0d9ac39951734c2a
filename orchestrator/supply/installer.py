"""`install.sh`: the release's installer, a POSIX shell script written beside its archives.

It reads the release's SHA256SUMS to learn which archives exist, picks the one for the
machine (architecture, then the best x86-64 level the CPU's /proc/cpuinfo flags allow;
on x86_64 the flavor's `-auto` archive where the release has one and no level was asked
for: its dispatcher picks the level each time the program starts, so the installed
program stays right on another CPU, a copied home folder or a shared disk), checks its
sha256 (and its minisign signature when minisign and a key are at hand), and unpacks its
binaries into <prefix>/bin, ~/.local/bin by default: `--prefix` is the root, as for
`make install` or pip (the -auto archive's level builds go into <prefix>/libexec/<binary>/,
where its dispatcher looks: beside the physical bin/ folder, as the dispatcher reads its
own real path, whichever shell runs the script). It depends on name and version only, so
every publication of the release writes the same bytes.
"""

from __future__ import annotations

import re

INSTALLER = "install.sh"

_SAFE = re.compile(r"^[A-Za-z0-9._+-]+$")

_TEMPLATE = r"""#!/bin/sh
# Installs @NAME@ @VERSION@ from its release: picks the archive for this machine, checks
# its sha256 against SHA256SUMS (and its minisign signature when minisign and a key are
# given), and puts its binaries into PREFIX/bin (~/.local/bin by default).
set -eu

name='@NAME@'
version='@VERSION@'
from='' prefix="${HOME:-}/.local" flavor=cpu key=''
level="${ORCHESTRATOR_INSTALL_LEVEL:-}"

die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'install.sh: %s\n' "$*" >&2; }

usage() {
  cat <<EOF
usage: install.sh [--from URL|DIR] [--prefix DIR] [--cpu-level LEVEL] [--flavor F] [--key FILE]
  --from       the release: an https:// base URL or a local folder (default: this script's folder)
  --prefix     the root: binaries into PREFIX/bin, the -auto archive's level builds
               into PREFIX/libexec (default: ~/.local)
  --cpu-level  install this x86-64 level's build instead of the one /proc/cpuinfo shows,
               and not the -auto archive that picks a level at every start
               (also ORCHESTRATOR_INSTALL_LEVEL)
  --flavor     cpu (default), cuda or rocm
  --key        a minisign public key (minisign.pub): the archive's signature is checked with it
EOF
}

while [ $# -gt 0 ]; do
  case $1 in
    --from|--prefix|--cpu-level|--flavor|--key)
      [ $# -ge 2 ] || die "$1 needs a value"
      case $1 in
        --from) from=$2 ;; --prefix) prefix=$2 ;; --cpu-level) level=$2 ;;
        --flavor) flavor=$2 ;; --key) key=$2 ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

if [ -z "$from" ]; then
  here=$(dirname -- "$0")
  [ -f "$here/SHA256SUMS" ] || die "no release beside this script: give --from URL or folder"
  from=$here
fi
from=${from%/}

work=$(mktemp -d "${TMPDIR:-/tmp}/install.XXXXXX") || die "cannot make a temporary folder"
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

fetch() {
  case $from in
    https://*)
      if command -v curl >/dev/null 2>&1; then
        curl --proto '=https' --tlsv1.2 -fsSL -o "$work/$1" "$from/$1" \
          || die "cannot download $from/$1"
      elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$work/$1" "$from/$1" || die "cannot download $from/$1"
      else
        die "neither curl nor wget is installed"
      fi ;;
    *://*) die "--from takes an https:// URL or a local folder, not $from" ;;
    *) [ -f "$from/$1" ] || die "$from/$1 is missing"; cp -- "$from/$1" "$work/$1" ;;
  esac
}

cpu_level() {
  flags=" $(sed -n '/^flags[[:space:]]*:/{s/^[^:]*://;p;q;}' /proc/cpuinfo 2>/dev/null) "
  best=v1
  for want in "v2:cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3" \
      "v3:avx avx2 bmi1 bmi2 f16c fma abm movbe xsave" \
      "v4:avx512f avx512bw avx512cd avx512dq avx512vl"; do
    for flag in ${want#*:}; do
      case $flags in *" $flag "*) ;; *) echo "$best"; return ;; esac
    done
    best=${want%%:*}
  done
  echo "$best"
}

case $(uname -m) in
  x86_64|amd64) arch=x86_64 ;;
  aarch64|arm64) arch=aarch64 ;;
  *) die "no build for this machine ($(uname -m))" ;;
esac

fetch SHA256SUMS
asked=$level
# the archives this release has, best first for this CPU
if [ "$arch" = x86_64 ]; then
  [ -n "$level" ] || level=$(cpu_level)
  case ${level#x86-64-} in
    v4) suffixes='-v4 -v3 ""' ;;
    v3) suffixes='-v3 ""' ;;
    v2|portable) suffixes='""' ;;
    v1) suffixes='-x86-64' ;;
    *) die "unknown CPU level $level (v1, v2, v3 or v4)" ;;
  esac
  say "x86-64 level ${level#x86-64-}"
else
  suffixes='""'
fi
archive=''
for suffix in $suffixes; do
  [ "$suffix" = '""' ] && suffix=''
  candidate="$name-$version-linux-$arch-$flavor$suffix.tar.xz"
  if grep -q "^[0-9a-f]\{64\}  $candidate\$" "$work/SHA256SUMS"; then
    archive=$candidate
    break
  fi
done
[ -n "$archive" ] || die "the release has no $flavor archive for $arch at this CPU level"
# One archive of every level, whose dispatcher runs the best for the CPU at each start: it
# holds the level just found, so it runs here too.
auto="$name-$version-linux-$arch-$flavor-auto.tar.xz"
if [ "$arch" = x86_64 ] && [ -z "$asked" ] \
    && grep -q "^[0-9a-f]\{64\}  $auto\$" "$work/SHA256SUMS"; then
  archive=$auto
  say "every x86-64 level in one archive: $name runs the best one for the CPU it starts on"
fi
say "fetching $archive"
fetch "$archive"

expected=$(grep "  $archive\$" "$work/SHA256SUMS" | cut -c1-64)
if command -v sha256sum >/dev/null 2>&1; then
  actual=$(sha256sum "$work/$archive" | cut -c1-64)
elif command -v shasum >/dev/null 2>&1; then
  actual=$(shasum -a 256 "$work/$archive" | cut -c1-64)
else
  die "neither sha256sum nor shasum is installed"
fi
[ "$actual" = "$expected" ] \
  || die "$archive: sha256 $actual is not $expected from SHA256SUMS; not installed"
say "sha256 matches SHA256SUMS"

if [ -n "$key" ]; then
  command -v minisign >/dev/null 2>&1 || die "--key given but minisign is not installed"
  fetch SHA256SUMS.minisig
  fetch "$archive.minisig"
  minisign -Vqm "$work/SHA256SUMS" -p "$key" || die "SHA256SUMS: bad signature; not installed"
  minisign -Vqm "$work/$archive" -p "$key" || die "$archive: bad signature; not installed"
  say "minisign signatures verified"
else
  say "no --key: signatures not checked (sha256 only)"
fi

command -v xz >/dev/null 2>&1 || die "xz is needed to unpack $archive (apt-get install xz-utils)"
mkdir -p "$work/unpacked"
xz -dc "$work/$archive" | (cd "$work/unpacked" && tar -xf - --no-same-owner) \
  || die "cannot unpack $archive"
top=${archive%.tar.xz}
case ${prefix%/} in
  */bin) say "--prefix is the root: binaries go into ${prefix%/}/bin" ;;
esac
bindir=${prefix%/}/bin
mkdir -p "$bindir" || die "cannot create $bindir"
# The physical folder: a bin/ reached through a symbolic link has another parent than its
# spelling shows, and the dispatcher finds libexec/ beside the real one. dash's cd
# resolves `..` in the spelling, so everything below works on this path.
bindir=$(CDPATH='' cd -P -- "$bindir" && pwd -P) || die "cannot enter $bindir"

# a new name, then a rename: a running copy of the old binary is not overwritten
put() {
  base=${1##*/}
  if ! { cp -- "$1" "$2/.$base.new" && chmod 0755 "$2/.$base.new" \
      && mv -f -- "$2/.$base.new" "$2/$base"; }; then
    die "cannot install into $2"
  fi
  say "installed $2/$base"
}

binaries="$work/unpacked/$top"
if [ -d "$binaries/libexec" ]; then
  # the level builds first: the dispatcher never points at a missing one
  libexec=${bindir%/*}/libexec
  mkdir -p "$libexec" || die "cannot create $libexec"
  for folder in "$binaries/libexec"/*; do
    [ -d "$folder" ] || continue
    mkdir -p "$libexec/${folder##*/}" || die "cannot create $libexec/${folder##*/}"
    for file in "$folder"/*; do
      if [ -f "$file" ] && [ -x "$file" ]; then put "$file" "$libexec/${folder##*/}"; fi
    done
  done
  binaries="$binaries/bin"
fi
for file in "$binaries"/*; do
  if [ ! -f "$file" ] || [ ! -x "$file" ]; then continue; fi
  put "$file" "$bindir"
done
"""


def render_installer(name: str, version: str) -> str:
    """install.sh for `name` `version` (both plain names: they are pasted into shell)."""
    for value in (name, version):
        if not _SAFE.match(value):
            raise ValueError(f"{value!r} cannot be written into install.sh")
    return _TEMPLATE.replace("@NAME@", name).replace("@VERSION@", version)

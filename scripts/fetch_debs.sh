#!/usr/bin/env bash
# Fetches Debian packages the build needs into third_party/root (unpacked with dpkg -x) without
# touching the system: a private apt configuration (own sources list, lists and cache) made from
# this machine's own apt sources (deb822 *.sources and one-line *.list files), whose signed
# metadata apt verifies with the keyrings those sources name (no [trusted=yes]); each .deb's
# SHA256 is checked again against the verified Packages index.
#
#   scripts/fetch_debs.sh headers     ORT C headers (libonnxruntime-dev)
#   scripts/fetch_debs.sh testdata    ONNX node tests (libonnx-testdata)
#   scripts/fetch_debs.sh PKG=VERSION any package, pinned the same way
#   scripts/fetch_debs.sh --sources   print the apt sources it would use, and stop
#
# Pins: the version below when the archive has it, else the newest available version with the
# same upstream major.minor (the same API, the same ONNX test set). Sources: on Debian, the
# machine's Debian mirror with the suites sid and experimental; on Ubuntu, the machine's own
# suites (main, universe). FETCH_DEBS_SOURCES replaces them (one-line apt source lines, e.g.
# "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] <mirror> sid main").
# FETCH_DEBS_DEST replaces third_party/ as the destination; FETCH_DEBS_APT_ETC /etc/apt (tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
etc="${FETCH_DEBS_APT_ETC:-/etc/apt}"
dest="${FETCH_DEBS_DEST:-$root/third_party}"
work="$dest/.apt"

pin_of() {
  case "$1" in
    headers) echo "libonnxruntime-dev=1.27.1+dfsg-1" ;;
    testdata) echo "libonnx-testdata=1.20.0-6" ;;
    *=*) echo "$1" ;;
    *) echo "fetch_debs: '$1' is not headers, testdata or PKG=VERSION" >&2; return 1 ;;
  esac
}

# Prints "uri|suites|components|signed-by" for every enabled deb entry of the machine's sources.
machine_sources() {
  local f
  for f in "$etc"/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no")
                              for (i = 1; i <= nu; i++) print u[i] "|" suites "|" comps "|" key
                            types = suites = comps = key = enabled = ""; nu = 0 }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         { field = tolower($1); sub(/:$/, "", field); $1 = ""; sub(/^[ \t]+/, "")
           if (field == "types") types = $0
           else if (field == "uris") nu = split($0, u, /[ \t]+/)
           else if (field == "suites") suites = $0
           else if (field == "components") comps = $0
           else if (field == "signed-by") key = $0
           else if (field == "enabled") enabled = tolower($0) }
         END { flush() }' "$f"
  done
  for f in "$etc"/sources.list "$etc"/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { opts = ""; n = 2
                       if ($2 ~ /^\[/) { while ($n !~ /\]$/) { opts = opts " " $n; n++ } opts = opts " " $n; n++ }
                       key = ""; if (match(opts, /signed-by=[^] ]+/)) key = substr(opts, RSTART + 10, RLENGTH - 10)
                       comps = ""; for (i = n + 2; i <= NF; i++) comps = comps (comps ? " " : "") $i
                       print $n "|" $(n + 1) "|" comps "|" key }' "$f"
  done
}

source_lines() {
  if [ -n "${FETCH_DEBS_SOURCES:-}" ]; then
    printf '%s\n' "$FETCH_DEBS_SOURCES"
    return
  fi
  local uri suites comps key opt found=""
  while IFS='|' read -r uri suites comps key; do
    opt=""
    [ -n "$key" ] && [ -f "$key" ] && opt="[signed-by=$key] "
    case "$uri" in
      */debian | */debian/)
        [ -n "$found" ] && continue # one Debian mirror is enough
        echo "deb ${opt}$uri sid main"
        echo "deb ${opt}$uri experimental main"
        found=debian ;;
      */ubuntu | */ubuntu/ | */ubuntu-ports | */ubuntu-ports/)
        echo "deb ${opt}$uri $suites main universe" ;;
    esac
  done < <(machine_sources)
}

if [ "${1:-}" = "--sources" ]; then
  source_lines | awk '!seen[$0]++'
  exit 0
fi
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/etc/preferences.d" "$dest/debs" "$dest/root"
source_lines | awk '!seen[$0]++' > "$work/etc/sources.list"
if [ ! -s "$work/etc/sources.list" ]; then
  echo "fetch_debs: no Debian or Ubuntu source found in $etc; set FETCH_DEBS_SOURCES, or give the" \
       "build ORT's headers with ORT_INCLUDE_DIR=/path/to/onnxruntime/include" >&2
  exit 1
fi
apt_opts=(-o "Dir::Etc::SourceList=$work/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$work/etc/preferences.d"
  -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)" -o "Acquire::Retries=3")
# Fails on a missing or bad signature (apt's default), so everything below rests on signed indexes.
apt-get "${apt_opts[@]}" -qq update

# The pinned version when available, else the newest with the pin's upstream major.minor.
choose_version() {
  local pkg="$1" want="$2" prefix best="" v
  prefix=$(echo "$want" | sed -E 's/^([0-9]+:)?([0-9]+\.[0-9]+)\..*/\2./')
  while read -r v; do
    [ "$v" = "$want" ] && { echo "$v"; return; }
    case "${v#*:}" in "$prefix"*) ;; *) continue ;; esac
    if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$best"; then best="$v"; fi
  done < <(apt-cache "${apt_opts[@]}" madison "$pkg" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | sort -u)
  [ -n "$best" ] && { echo "$best"; return; }
  echo "fetch_debs: $pkg: neither $want nor any ${prefix}* version in $(tr '\n' ';' < "$work/etc/sources.list")" >&2
  return 1
}

cd "$dest/debs"
for arg in "$@"; do
  pin=$(pin_of "$arg")
  pkg="${pin%%=*}"
  version=$(choose_version "$pkg" "${pin#*=}")
  [ "$version" = "${pin#*=}" ] || echo "fetch_debs: $pkg $version (pin ${pin#*=} not in the archive)" >&2
  apt-get "${apt_opts[@]}" -qq download "$pkg=$version"
  deb=$(ls "${pkg}_${version//:/%3a}_"*.deb | head -n 1) # apt-get download's name: pkg_version_arch.deb
  expected=$(apt-cache "${apt_opts[@]}" show "$pkg=$version" | awk '/^SHA256:/ {print $2; exit}')
  actual=$(sha256sum "$deb" | cut -d' ' -f1)
  if [ -z "$expected" ] || [ "$expected" != "$actual" ]; then
    echo "fetch_debs: $deb: SHA256 $actual does not match the signed index ($expected)" >&2
    rm -f "$deb"
    exit 1
  fi
  dpkg -x "$deb" "$dest/root"
  echo "fetch_debs: $pkg $version verified and unpacked into $dest/root"
done

#!/usr/bin/env bash
# Fetches Debian packages the build needs (ORT C headers, ONNX node test data) into third_party/
# without touching the system: a private apt configuration (own sources list, lists and cache)
# whose mirror is read from this machine's own apt sources; packages are unpacked with dpkg -x.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/third_party"
work="$dest/.apt"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/etc/preferences.d" "$dest/debs"

mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/{for(i=2;i<=NF;i++) if ($i ~ /debian\/?$/) {print $i; exit}}' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "fetch_debs: no Debian mirror found in /etc/apt sources" >&2; exit 1; }

cat > "$work/etc/sources.list" <<SRC
deb [trusted=yes] $mirror sid main
deb [trusted=yes] $mirror experimental main
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$work/etc/preferences.d"
  -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)" -o "Acquire::Retries=3")

apt-get "${apt_opts[@]}" -qq update
cd "$dest/debs"
for pkg in "$@"; do
  apt-get "${apt_opts[@]}" -qq download "$pkg"
done
for deb in "$dest"/debs/*.deb; do
  dpkg -x "$deb" "$dest/root"
done
echo "fetch_debs: unpacked $* into $dest/root"

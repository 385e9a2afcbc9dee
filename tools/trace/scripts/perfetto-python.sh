#!/usr/bin/env bash
# Prints the path of a Python interpreter that has the official Perfetto protos (the `perfetto`
# PyPI package ships perfetto_trace_pb2), creating a venv for it under the provisioning cache
# on first use: ${BELFRY_CACHE:-/var/cache/belfry}/venv/perfetto-<version>.
# Exit status 3: no python3 with venv, or PyPI unreachable (the caller skips, saying why).
set -euo pipefail
version=0.59.1
protobuf=7.36.2
venv="${BELFRY_CACHE:-/var/cache/belfry}/venv/perfetto-$version"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
    echo "$venv/bin/python"
    exit 0
fi
command -v python3 >/dev/null || { echo "perfetto-python: no python3" >&2; exit 3; }
mkdir -p "$(dirname "$venv")" || { echo "perfetto-python: cannot create $(dirname "$venv")" >&2; exit 3; }
tmp="$venv.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp" >&2 || { echo "perfetto-python: python3 -m venv failed" >&2; exit 3; }
if ! "$tmp/bin/pip" install --quiet --disable-pip-version-check "perfetto==$version" "protobuf==$protobuf" >&2; then
    echo "perfetto-python: pip install perfetto==$version failed (PyPI unreachable?)" >&2
    exit 3
fi
rm -rf "$venv"
mv "$tmp" "$venv"   # only bin/python is used: a symlink, and the venv is found next to it
echo "$venv/bin/python"

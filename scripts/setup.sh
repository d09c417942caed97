#!/usr/bin/env bash
# Installs what MiniInfer's build and tests need on Debian 12 (idempotent): Debian packages
# through apt-get, and the tests' Python packages into .venv. The CUDA toolkit is optional
# (the CUDA backend builds when nvcc is found) and is not installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libzmq3-dev cppzmq-dev prometheus curl iproute2
  libcurl4-openssl-dev libssl-dev
  clang libclang-rt-14-dev clang-format
  python3 python3-venv python3-pip
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
echo "setup: done"

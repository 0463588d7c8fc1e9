#!/usr/bin/env bash
# Installs the Debian packages abstream needs when they are missing.
#   scripts/install-system-deps.sh run    Java 17 (Spark's JVM)
#   scripts/install-system-deps.sh test   the same, plus Prometheus, its Pushgateway,
#                                         PostgreSQL's server (the serving store's tests
#                                         start one of their own), Chromium (the results
#                                         page's tests), systemd-analyze and chattr (the
#                                         fault tests)
set -euo pipefail

want=()
java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  want+=(openjdk-17-jre-headless)
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  want+=(python3-venv)
fi
if [ "${1:-run}" = "test" ]; then
  # Prometheus, promtool and the Pushgateway: the monitoring tests run the real ones.
  command -v promtool >/dev/null 2>&1 || want+=(prometheus)
  command -v prometheus-pushgateway >/dev/null 2>&1 || want+=(prometheus-pushgateway)
  # PostgreSQL's server programs (initdb, postgres): Debian keeps them off the PATH.
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || want+=(postgresql)
  command -v chromium >/dev/null 2>&1 || want+=(chromium fonts-dejavu-core)
  # The fault tests: systemd-analyze checks the unit, chattr makes a table read-only.
  command -v systemd-analyze >/dev/null 2>&1 || want+=(systemd)
  command -v chattr >/dev/null 2>&1 || want+=(e2fsprogs)
fi

if [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${want[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "need root (or sudo) to install: ${want[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${want[@]}"

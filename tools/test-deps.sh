#!/usr/bin/env bash
# What the tests (and, with --run, taskmesh dev) run beyond Go, and the
# Debian packages that install it.
# `make test` runs this before any test, and so does .ci/run:
#   - nothing missing: it says nothing and succeeds;
#   - something missing, run as root where apt-get is: it installs it
#     (apt-get update first), and creates the postgres user the tests run
#     the PostgreSQL server as (initdb and postgres refuse root);
#   - something missing otherwise, or with --check: it names what is
#     missing and the command that installs it, and fails.
# With --run it looks only for what `make run` (taskmesh dev) uses: the
# PostgreSQL server it starts, and ffmpeg with a CJK font for the local
# agent's video runner. It installs them the same way, and where it cannot,
# it names them and what goes without them, and lets Taskmesh start.
# Detection uses shell builtins only (command -v, globs, file tests), so
# it answers the same under any PATH.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

check_only=false
run_only=false
me=test-deps
case "${1:-}" in
  "") ;;
  --check) check_only=true ;;
  --run) run_only=true me=run-deps ;;
  *) echo "usage: $0 [--check | --run]" >&2; exit 2 ;;
esac

need=()
want() { # want PACKAGE: add it once
  local p
  for p in "${need[@]}"; do [[ $p == "$1" ]] && return; done
  need+=("$1")
}
program() { command -v "$1" >/dev/null 2>&1 || want "$2"; }

# PostgreSQL server binaries: tests start their own throwaway servers,
# and taskmesh dev its own (unless DATABASE_URL names one).
if ! $run_only || [[ -z ${DATABASE_URL:-} ]]; then
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || want postgresql
fi
# ffmpeg/ffprobe: the executor's video runner; a CJK font for the title
# card and the "AI生成" watermark.
program ffmpeg ffmpeg
program fc-list fontconfig
[[ -e /usr/share/fonts/truetype/wqy/wqy-zenhei.ttc ]] || compgen -G '/usr/share/fonts/opentype/noto/NotoSansCJK-*.ttc' >/dev/null ||
  want fonts-wqy-zenhei
if ! $run_only; then
  program pgbench postgresql-client
  # kcat: the independent (librdkafka) client that reads events back.
  program kcat kcat
  # redis-server: rate-limit tests start their own throwaway servers.
  program redis-server redis-server
  # bubblewrap: the agent's task sandbox and its tests.
  program bwrap bubblewrap
  program git git
  program make make
  program python3 python3
  # node and npm build the web console (make check-console); chromium runs
  # the console's browser test.
  program node nodejs
  program npm npm
  program chromium chromium
  # The image test puts the machine's CA bundle into the image.
  [[ -e /etc/ssl/certs/ca-certificates.crt ]] || want ca-certificates
  # A real Slurm on loopback (deployments/slurm/cluster.sh): munge,
  # slurmctld, slurmd, slurmrestd, the client tools, and slurmdbd with a
  # private MariaDB for accounting (sacct, QoS).
  program munged munge
  program slurmctld slurmctld
  program slurmd slurmd
  program slurmrestd slurmrestd
  program scontrol slurm-client
  program slurmdbd slurmdbd
  program mariadbd mariadb-server
fi

# As root the tests run the PostgreSQL server as the user postgres.
no_user=false
if ((EUID == 0)); then
  no_user=true
  while IFS=: read -r name _; do
    if [[ $name == postgres ]]; then no_user=false; break; fi
  done </etc/passwd
fi

if ((${#need[@]} == 0)) && ! $no_user; then
  exit 0
fi

install() {
  if ((${#need[@]})); then
    echo "$me: installing ${need[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" || return 1
  fi
  if $no_user && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres || return 1
  fi
}

if ! $check_only && ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
  if install; then
    exit 0
  fi
  # For the tests a failed installation is a failure; make run goes on
  # and says below what is missing.
  $run_only || exit 1
fi

if $run_only; then
  # Taskmesh starts without them: dev explains a missing PostgreSQL, and
  # its banner says when video generations have no runner.
  if ((${#need[@]})); then
    echo "$me: this machine lacks: ${need[*]}" >&2
    [[ " ${need[*]} " == *" postgresql "* ]] &&
      echo "$me: without postgresql, taskmesh dev cannot start its database (it can use one named by DATABASE_URL)" >&2
    [[ " ${need[*]} " == *" ffmpeg "* ]] &&
      echo "$me: without ffmpeg, the local agent renders no video generations: they wait QUEUED" >&2
    echo "$me: install them with: apt-get update && apt-get install -y --no-install-recommends ${need[*]}" >&2
  fi
  if $no_user; then
    echo "$me: as root taskmesh dev runs PostgreSQL as the user postgres, which does not exist: useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres" >&2
  fi
  exit 0
fi
if ((${#need[@]})); then
  echo "test-deps: the tests need packages this machine lacks: ${need[*]}" >&2
  echo "test-deps: install them with: apt-get update && apt-get install -y --no-install-recommends ${need[*]}" >&2
fi
if $no_user; then
  echo "test-deps: the tests run the PostgreSQL server as the user postgres, which does not exist: useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres" >&2
fi
exit 1

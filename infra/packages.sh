#!/usr/bin/env bash
# Install the Debian packages that a part of ffjobs runs on and this machine lacks, in one
# apt-get run (one index update, one install):
#   bash infra/packages.sh stack            # the local stack (infra/local/up.sh)
#   bash infra/packages.sh browser          # headless Chromium for the browser tests
#   bash infra/packages.sh stack browser    # both: what `make test` needs
# Returns at once when nothing is missing. As a non-root user it names what to install with
# sudo: an error for the stack, which the tests cannot do without, a warning for the browser,
# whose tests then say why they cannot run.
set -euo pipefail

log() { printf 'packages.sh: %s\n' "$*" >&2; }

stack_missing() {
  command -v munged >/dev/null || echo munge
  command -v mariadbd >/dev/null || echo mariadb-server
  command -v slurmdbd >/dev/null || echo slurmdbd
  command -v slurmctld >/dev/null || echo slurm-wlm
  command -v curl >/dev/null || echo curl
  { command -v ip && command -v tc; } >/dev/null || echo iproute2
  command -v nsenter >/dev/null || echo util-linux
  command -v pkill >/dev/null || echo procps
}

# Debian's chromium and its chromedriver (one source package, so their versions match) and a
# font to render text in the screenshots. Nothing downloads a browser at run time.
browser_missing() {
  command -v chromium >/dev/null || echo chromium
  command -v chromedriver >/dev/null || echo chromium-driver
  dpkg -s fonts-dejavu-core >/dev/null 2>&1 || echo fonts-dejavu-core
}

# what_is_missing PART...: sets missing (every part's) and required (the stack's)
what_is_missing() {
  missing=() required=()
  local part found
  for part in "$@"; do
    case $part in
      stack) mapfile -t found < <(stack_missing); required+=("${found[@]}") ;;
      browser) mapfile -t found < <(browser_missing) ;;
      *) log "error: unknown part '$part' (stack, browser)"; exit 2 ;;
    esac
    missing+=("${found[@]}")
  done
}

what_is_missing "$@"
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  if [[ ${#required[@]} -gt 0 ]]; then
    log "error: missing packages ${missing[*]}; run: sudo apt-get install ${missing[*]}"
    exit 1
  fi
  log "browser tests need ${missing[*]}: sudo apt-get install ${missing[*]}"
  exit 0
fi

# Two of these at once (two checkouts' `make test` on a new machine) take turns, and the second
# installs only what the first left missing; another apt-get holding dpkg's lock is waited for.
exec 9>/run/lock/ffjobs-packages.lock
flock 9
what_is_missing "$@"
[[ ${#missing[@]} -eq 0 ]] && exit 0
log "installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt_log=$(mktemp "${TMPDIR:-/tmp}/ffjobs-apt.XXXXXX")
# policy-rc.d exit 101 keeps the packages' init scripts from starting system-wide daemons
# (MariaDB, munge, SLURM): the local stack runs its own under its state directory.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created_policy=1
fi
status=0
{
  apt-get update -q -o DPkg::Lock::Timeout=600 &&
    apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}"
} >"$apt_log" 2>&1 || status=$?
if [[ $created_policy -eq 1 ]]; then rm -f "$policy"; fi
if [[ $status -ne 0 ]]; then
  tail -n 20 "$apt_log" >&2
  log "error: apt-get failed (exit $status); its whole output: $apt_log"
  exit 1
fi
rm -f "$apt_log"

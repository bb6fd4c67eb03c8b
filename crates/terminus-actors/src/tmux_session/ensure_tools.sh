# shellcheck shell=bash
# Installs tmux when the image lacks it (run as root by the terminal's set-up).
# $missing is a list: its words are meant to be split.
# shellcheck disable=SC2086
need="tmux"
missing=""; for t in $need; do command -v "$t" >/dev/null 2>&1 || missing="$missing $t"; done
if [ -n "$missing" ]; then
  if command -v apt-get >/dev/null 2>&1; then DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1
  elif command -v dnf >/dev/null 2>&1; then dnf install -y $missing >/dev/null 2>&1
  elif command -v yum >/dev/null 2>&1; then yum install -y $missing >/dev/null 2>&1
  elif command -v apk >/dev/null 2>&1; then apk add --no-cache $missing >/dev/null 2>&1
  elif command -v pacman >/dev/null 2>&1; then pacman -S --noconfirm $missing >/dev/null 2>&1
  elif command -v zypper >/dev/null 2>&1; then zypper install -y -n $missing >/dev/null 2>&1
  fi
fi
for t in $need; do command -v "$t" >/dev/null 2>&1 || printf 'missing:%s\n' "$t"; done
true

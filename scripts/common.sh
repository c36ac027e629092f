# Shared by scripts/setup and scripts/test.

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
note() { printf '    %s\n' "$*"; }

# Runs a command as USER (as is, when that is already who we are).
as_user() {
  local user=$1; shift
  if [ "$(id -un)" = "$user" ]; then "$@"; else runuser -u "$user" -- "$@"; fi
}

# Prints the cargo of USER: on their PATH, else rustup's default place.
find_cargo() {
  local user=$1 home c
  home=$(getent passwd "$user" | cut -d: -f6)
  c=$(as_user "$user" bash -lc 'command -v cargo' 2>/dev/null || true)
  [ -n "$c" ] || { [ -x "$home/.cargo/bin/cargo" ] && c="$home/.cargo/bin/cargo"; }
  [ -z "$c" ] && [ "$user" = "$(id -un)" ] && c=$(command -v cargo || true)
  [ -n "$c" ] && printf '%s\n' "$c"
}

# Runs a command as USER with a clean login-like environment (HOME, PATH of
# that user), as podman needs: runuser alone keeps the caller's HOME.
as_login_user() {
  local user=$1 home; shift
  home=$(getent passwd "$user" | cut -d: -f6)
  if [ "$(id -un)" = "$user" ]; then "$@"; return; fi
  (cd / && runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin "$@")
}

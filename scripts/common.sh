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

# Prepares USER for rootless podman: subordinate uids and gids, and the
# overlay storage driver (fast starts; podman's rootless default here is
# vfs, which copies the image at every start). A store podman already made
# with another driver records it: an empty one is removed so the next
# podman call makes an overlay store; one holding images or containers is
# left, and its owner is told how to reset it. Idempotent.
# A new account may get the uid of a deleted one, whose per-uid runtime
# folders outlive it: podman would then try to join the deleted user's
# pause process ("cannot re-exec process to join the existing user
# namespace"). Nothing there belongs to the new account.
clear_stale_runtime() {
  local uid
  uid=$(id -u "$1")
  rm -rf "/tmp/podman-run-$uid" "/tmp/containers-user-$uid" "/tmp/run-$uid" \
    "/dev/shm/lazaret-$uid" "/dev/shm/libpod_rootless_lock_$uid" "/run/user/$uid/libpod" \
    "/run/user/$uid/containers"
}

prepare_user() {
  local user=$1 home group
  home=$(getent passwd "$user" | cut -d: -f6)
  group=$(id -gn "$user")
  for f in /etc/subuid /etc/subgid; do
    touch "$f"
    if ! grep -q "^$user:" "$f"; then
      local start
      start=$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' "$f")
      echo "$user:$start:65536" >> "$f"
      note "$f: gave $user 65536 ids from $start"
    fi
  done
  local sc="$home/.config/containers/storage.conf"
  [ ! -f "$sc" ] || { note "$sc exists: left as it is"; return 0; }
  local store="$home/.local/share/containers/storage"
  if [ -d "$store" ]; then
    local held
    held=$(as_login_user "$user" podman ps -aq 2>/dev/null; as_login_user "$user" podman images -q 2>/dev/null)
    if [ -n "$held" ]; then
      note "$store holds $user's images or containers, made with another storage driver: as $user, run"
      note "  podman system reset --force   (deletes them), then: sudo scripts/add-user $user"
      return 0
    fi
    rm -rf "$store"
    note "$store: removed (empty, made with another storage driver)"
  fi
  install -d -o "$user" -g "$group" "$home/.config" "$home/.config/containers"
  printf '[storage]\ndriver = "overlay"\n' > "$sc"
  chown "$user:$group" "$sc"
  note "$sc: overlay storage driver"
}

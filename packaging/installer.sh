#!/bin/sh
# rag-appliance @VERSION@ (@FLAVOUR@): a self-extracting package. After this header come the bytes of a gzip'd tar
# (the frozen server, its models, settings, unit, SBOM, licences, SHA256SUMS) whose sha256 is PAYLOAD_SHA256 below.
#
#   sudo sh FILE install                        /opt/rag-appliance/<version>, a systemd unit, the appliance user
#   sh FILE install --prefix DIR --no-service   into DIR, no user, no unit (containers, tests)
#        [--data-dir DIR] [--port N] [--check-start] [--ready-timeout S]
#   sh FILE uninstall [--prefix DIR] [--no-service] [--purge]    the data stays unless --purge
#   sh FILE verify | info
#
# Nothing is written before the payload's checksum is verified; the unpacked files are checked against SHA256SUMS
# before `current` moves. An upgrade that does not become ready (/readyz) is rolled back to the previous version.
set -eu
VERSION="@VERSION@"
FLAVOUR="@FLAVOUR@"
PAYLOAD_SHA256="@PAYLOAD_SHA256@"
HEADER_BYTES=@HEADER_BYTES@
UNIT=rag-appliance.service
SELF=$0

say() { printf 'rag-appliance: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
payload() { tail -c +$((HEADER_BYTES + 1)) "$SELF"; }

verify() {
    actual=$(payload | sha256sum | cut -d' ' -f1)
    if [ "$actual" != "$PAYLOAD_SHA256" ]; then
        say "this package is damaged (payload sha256 $actual, expected $PAYLOAD_SHA256): nothing was written"
        exit 2
    fi
}

# Options; the defaults depend on whether this is a service install.
COMMAND=${1:-help}
[ $# -gt 0 ] && shift
PREFIX=""; SERVICE=1; PURGE=0; DATA=""; PORT=""; CHECK_START=0; READY_TIMEOUT=900
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; PREFIX=$2; shift ;;
        --data-dir) [ $# -ge 2 ] || die "--data-dir needs a folder"; DATA=$2; shift ;;
        --port) [ $# -ge 2 ] || die "--port needs a number"; PORT=$2; shift ;;
        --ready-timeout) [ $# -ge 2 ] || die "--ready-timeout needs seconds"; READY_TIMEOUT=$2; shift ;;
        --no-service) SERVICE=0 ;;
        --check-start) CHECK_START=1 ;;
        --purge) PURGE=1 ;;
        *) die "unknown option '$1' (see the top of this file)" ;;
    esac
    shift
done
if [ "$SERVICE" = 1 ]; then
    PREFIX=${PREFIX:-/opt/rag-appliance}; DATA=${DATA:-/var/lib/rag-appliance}; ETC=/etc/rag-appliance
else
    [ -n "$PREFIX" ] || die "--no-service needs --prefix DIR"
    DATA=${DATA:-$PREFIX/data}; ETC=$PREFIX/etc
fi
case $PREFIX in /*) ;; *) PREFIX=$(pwd)/$PREFIX ;; esac
case $DATA in /*) ;; *) DATA=$(pwd)/$DATA ;; esac

point_current() {  # atomically: a new link beside `current`, renamed over it
    ln -sfn "$1" "$PREFIX/.current.$$"
    mv -T "$PREFIX/.current.$$" "$PREFIX/current"
}

settings() {  # kept when present (upgrades, reinstalls); written from the package's template otherwise
    mkdir -p "$ETC"
    if [ ! -f "$ETC/appliance.toml" ]; then
        sed -e "s|@DATA_DIR@|$DATA|" -e "s|@PORT@|${PORT:-8080}|" "$PREFIX/$VERSION/etc/appliance.toml.in" \
            > "$ETC/appliance.toml.new"
        mv "$ETC/appliance.toml.new" "$ETC/appliance.toml"
        say "settings written to $ETC/appliance.toml"
    else
        say "settings kept: $ETC/appliance.toml"
    fi
    [ "$SERVICE" = 1 ] || return 0
    ln -sfn "$ETC" "$PREFIX/etc"  # the launcher reads PREFIX/etc/appliance.toml
    chown root:appliance "$ETC" "$ETC/appliance.toml"
    chmod 0750 "$ETC"; chmod 0640 "$ETC/appliance.toml"
}

service_user() {
    if ! getent passwd appliance >/dev/null; then
        useradd --system --home-dir "$DATA" --no-create-home --shell /usr/sbin/nologin --user-group appliance
        say "created the system user 'appliance'"
    fi
    mkdir -p "$DATA"
    chown appliance:appliance "$DATA"; chmod 0750 "$DATA"
}

# Start the installed `current` and wait for /readyz. As a service: restart the unit. Otherwise (--check-start):
# a trial run in the background, stopped once it answers.
start_and_wait() {
    launcher="$PREFIX/current/bin/appliance"
    if [ "$SERVICE" = 1 ]; then
        sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@DATA_DIR@|$DATA|g" "$PREFIX/current/etc/$UNIT" \
            > "/etc/systemd/system/$UNIT"
        systemctl daemon-reload
        systemctl enable --quiet "$UNIT"
        systemctl restart "$UNIT"
        "$launcher" ready --wait "$READY_TIMEOUT"
        return
    fi
    [ "$CHECK_START" = 1 ] || return 0
    mkdir -p "$DATA"
    "$launcher" serve >"$DATA/check-start.log" 2>&1 &
    trial=$!
    status=0
    "$launcher" ready --wait "$READY_TIMEOUT" --pid "$trial" || status=$?
    kill -TERM "$trial" 2>/dev/null || true
    wait "$trial" 2>/dev/null || true
    [ "$status" = 0 ] || say "the trial start's log: $DATA/check-start.log"
    return "$status"
}

install_package() {
    verify
    if [ "$SERVICE" = 1 ]; then
        [ "$(id -u)" = 0 ] || die "a service install needs root (sudo); or use --prefix DIR --no-service"
        # systemd's own test for a booted system (sd_booted): a container may have systemctl but no systemd
        [ -d /run/systemd/system ] && command -v systemctl >/dev/null \
            || die "systemd is not running here: use --prefix DIR --no-service"
    fi
    mkdir -p "$PREFIX"
    previous=$(readlink "$PREFIX/current" 2>/dev/null || true)
    [ "$previous" != "$VERSION" ] || die "$VERSION is installed already in $PREFIX (uninstall first to reinstall)"
    incoming="$PREFIX/.incoming-$VERSION.$$"
    trap 'rm -rf "$incoming"' EXIT INT TERM
    mkdir "$incoming"
    say "unpacking $VERSION ($FLAVOUR) into $PREFIX"
    payload | tar -xzf - -C "$incoming"
    (cd "$incoming" && sha256sum --check --quiet --strict SHA256SUMS) || die "the unpacked files do not match SHA256SUMS"
    rm -rf "${PREFIX:?}/$VERSION"  # a half-installed earlier attempt of this version
    mv "$incoming" "$PREFIX/$VERSION"
    trap - EXIT INT TERM
    [ "$SERVICE" = 0 ] || service_user
    settings
    point_current "$VERSION"
    if start_and_wait; then
        say "$VERSION is installed: $PREFIX/current/bin/appliance (data $DATA, settings $ETC/appliance.toml)"
        return 0
    fi
    if [ -n "$previous" ] && [ -d "$PREFIX/$previous" ]; then
        say "$VERSION did not become ready: rolling back to $previous"
        point_current "$previous"
        start_and_wait || say "$previous did not become ready either: see 'journalctl -u $UNIT'"
    else
        say "$VERSION did not become ready and there is no earlier version to go back to"
    fi
    rm -rf "${PREFIX:?}/$VERSION"
    [ -n "$previous" ] || rm -f "$PREFIX/current"
    exit 3
}

uninstall_package() {
    if [ ! -e "$PREFIX/current" ] && [ ! -d "$PREFIX" ]; then  # --purge after an uninstall: what it kept
        { [ "$PURGE" = 1 ] && { [ -e "$DATA" ] || [ -e "$ETC" ]; }; } || die "nothing is installed in $PREFIX"
    fi
    if [ "$SERVICE" = 1 ]; then
        [ "$(id -u)" = 0 ] || die "uninstalling the service needs root (sudo)"
        systemctl disable --now --quiet "$UNIT" 2>/dev/null || true
        rm -f "/etc/systemd/system/$UNIT"
        systemctl daemon-reload 2>/dev/null || true
    fi
    for version in "$PREFIX"/*/bin/appliance; do
        if [ -e "$version" ]; then rm -rf "${version%/bin/appliance}"; fi
    done
    rm -f "$PREFIX/current"
    if [ -L "$PREFIX/etc" ]; then rm -f "$PREFIX/etc"; fi  # a service install's link to /etc/rag-appliance
    if [ "$PURGE" = 1 ]; then
        rm -rf "$DATA" "$ETC"
        [ "$SERVICE" = 0 ] || userdel appliance 2>/dev/null || true
        say "uninstalled; data, settings and the user removed (--purge)"
    else
        say "uninstalled; kept the data in $DATA and the settings in $ETC (--purge removes them)"
    fi
    rmdir "$PREFIX" 2>/dev/null || true
}

case $COMMAND in
    install) install_package ;;
    uninstall) uninstall_package ;;
    verify) verify; say "the package is intact ($VERSION, $FLAVOUR, payload sha256 $PAYLOAD_SHA256)" ;;
    info) printf 'rag-appliance %s %s payload-sha256 %s\n' "$VERSION" "$FLAVOUR" "$PAYLOAD_SHA256" ;;
    *) sed -n '2,12p' "$SELF" | sed 's/^# \{0,1\}//'; [ "$COMMAND" = help ] || exit 1 ;;
esac
exit 0

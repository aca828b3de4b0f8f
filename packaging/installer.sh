#!/bin/sh
# rag-appliance @VERSION@ (@FLAVOUR@): a self-extracting package. After this header come the bytes of a gzip'd tar
# (the frozen server, its models, settings, unit, SBOM, licences, SHA256SUMS) whose sha256 is PAYLOAD_SHA256 below.
#
#   sudo sh FILE install                        /opt/rag-appliance/<version>, a systemd unit, the appliance user
#   sh FILE install --prefix DIR --no-service   into DIR, no user, no unit (containers, tests)
#        [--data-dir DIR] [--port N] [--memory-max SIZE] [--check-start] [--ready-timeout S]
#   sh FILE uninstall [--prefix DIR] [--no-service] [--purge]    the data stays unless --purge
#   sh FILE verify | info | unit [--prefix DIR] [--data-dir DIR] [--memory-max SIZE]
#
# The file is read once: its payload is hashed (and, with FILE.asc beside it and gpg installed, its signature
# checked) while it unpacks into a staging folder, which is removed unless both match (exit 2). The unpacked files
# are checked against SHA256SUMS before `current` moves. An upgrade that does not become ready (/readyz) is rolled
# back to the previous version. DIRs: absolute, letters, digits and . _ / + - only.
set -eu
# pipefail where the shell has it; Debian 12's sh (dash 0.5.12) does not, so the payload's pipeline checks itself
if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi
LC_ALL=C
export LC_ALL
VERSION="@VERSION@"
FLAVOUR="@FLAVOUR@"
PAYLOAD_SHA256="@PAYLOAD_SHA256@"
HEADER_BYTES=@HEADER_BYTES@
UNIT=rag-appliance.service
SELF=$0

say() { printf 'rag-appliance: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
refuse() { say "$*"; exit 2; }

# sha256 of stdin as "HEX rest" (stdin's name after it). OpenSSL's uses the CPU's SHA instructions where it has them:
# ~5x coreutils' (1.2 against 0.24 GB/s on an AMD EPYC), a minute of a 5.8 GB install; sha256sum where no openssl.
hash_stdin() {
    if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r; else sha256sum; fi
}

# The unpacked tree in $1 against its SHA256SUMS: the few large files (weights, torch's libraries: most of the
# bytes) through hash_stdin one by one, the thousands of small ones in one sha256sum (a process per file would cost
# more than it saves). Every listed file is checked either way; exit status 1 when one differs or is missing.
check_unpacked() {
    (
        cd "$1" || exit 1
        find . -type f -size +16M >"$1.large" || exit 1
        # lines of SHA256SUMS are "HEX  path", find's "./path"; escaped names (a leading backslash) stay with sha256sum
        awk -v large="$1.large" -v small="$1.small" '
            BEGIN { while ((getline path < large) > 0) big[substr(path, 3)] = 1 }
            length($1) == 64 && substr($0, 65, 2) == "  " && (substr($0, 67) in big) { print; next }
            { print > small }' SHA256SUMS >"$1.big" || exit 1
        [ ! -s "$1.small" ] || sha256sum --check --quiet --strict "$1.small" || exit 1
        while IFS= read -r line; do
            actual=$(hash_stdin <"${line#*  }") || exit 1
            [ "${actual%% *}" = "${line%%  *}" ] || { printf '%s: FAILED\n' "${line#*  }" >&2; exit 1; }
        done <"$1.big"
    )
}

# The checks and the unpacking share one read of this file: reading it again to unpack after hashing it would
# install whatever replaced it in between. `tee` hands the bytes to gpg (the whole file, when a signature sits
# beside it) and to hash_stdin (the payload) while tar unpacks them into $1 (nothing: check only); $2 is a scratch
# folder for the fifos. Returns when both checks passed; refuses (exit 2) otherwise, the caller's trap removing $1.
read_checked() {
    into=$1 scratch=$2 signer=""
    mkfifo "$scratch/payload"
    hash_stdin <"$scratch/payload" >"$scratch/payload.sha256" &
    hasher=$!
    if signature_beside; then
        mkfifo "$scratch/whole"
        gpg --batch --verify "$SELF.asc" - <"$scratch/whole" >"$scratch/gpg.log" 2>&1 &
        signer=$!
    fi
    {
        if [ -n "$signer" ]; then tee "$scratch/whole" <"$SELF" | tail -c +$((HEADER_BYTES + 1))
        else tail -c +$((HEADER_BYTES + 1)) "$SELF"; fi
    } | tee "$scratch/payload" | {
        if [ -n "$into" ]; then tar -xzf - -C "$into" 2>"$scratch/tar.log" || : >"$scratch/tar.failed"; fi
        cat >/dev/null  # what tar leaves unread (or all of it): the checks must see every byte
    } || :  # a reader gone early (gpg refusing the signature, say) shows in the checks below
    if [ -n "$signer" ] && ! wait "$signer"; then
        sed 's/^/  /' "$scratch/gpg.log" >&2
        refuse "the signature $SELF.asc does not verify this file: nothing was installed"
    fi
    if ! wait "$hasher"; then  # not the package's fault: a full disk under the scratch folder, say
        die "could not hash the payload into $scratch (is that disk full? TMPDIR picks another): nothing was written"
    fi
    actual=$(cut -d' ' -f1 <"$scratch/payload.sha256")
    if [ "$actual" != "$PAYLOAD_SHA256" ]; then
        refuse "this package is damaged (payload sha256 $actual, expected $PAYLOAD_SHA256): nothing was written"
    fi
    if [ -e "$scratch/tar.failed" ]; then cat "$scratch/tar.log" >&2; die "the payload did not unpack"; fi
    [ -z "$signer" ] || say "the signature $SELF.asc is good (gpg)"
}

signature_beside() {  # a detached signature (build.py --sign-key) beside this file, and gpg to check it
    [ -f "$SELF.asc" ] || return 1
    if ! command -v gpg >/dev/null 2>&1; then
        say "gpg is not installed: $SELF.asc was not checked (only the payload's sha256)"
        return 1
    fi
}

# Folders end up in sed replacements, the TOML settings and the unit (where a space splits ReadWritePaths and %
# starts a specifier): absolute, and only characters that none of these treats specially.
check_folder() {  # $1: the option, $2: its value
    case $2 in
        /*) ;;
        *) die "$1 '$2': give an absolute folder" ;;
    esac
    case $2 in
        *[!A-Za-z0-9._/+-]*)
            die "$1: only letters, digits and . _ / + - may name the folder (no spaces, quotes, backslashes, %)" ;;
    esac
    case $2/ in
        */./*|*/../*|*//*) die "$1 '$2': no '.', '..' or empty parts" ;;
    esac
}

check_number() {  # $1: the option, $2: its value, $3: the largest allowed
    case $2 in
        ''|*[!0-9]*|0*) die "$1 '$2': a whole number from 1" ;;
    esac
    [ "${#2}" -le 9 ] && [ "$2" -le "$3" ] || die "$1 '$2': at most $3"
}

# systemd's MemoryMax: bytes with an optional K/M/G/T, a share of the RAM (N%), or infinity
check_memory_max() {
    [ "$1" != infinity ] || return 0
    case $1 in *%) check_number --memory-max "${1%\%}" 100; return ;; esac
    case ${1%[KMGT]} in
        ''|*[!0-9]*|0*) die "--memory-max '$1': bytes with K, M, G or T (16G), a share of the RAM (90%), or infinity" ;;
    esac
}

# Options; the defaults depend on whether this is a service install.
COMMAND=${1:-help}
[ $# -gt 0 ] && shift
PREFIX=""; SERVICE=1; PURGE=0; DATA=""; PORT=""; CHECK_START=0; READY_TIMEOUT=900; MEMORY_MAX=""
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; PREFIX=$2; shift ;;
        --data-dir) [ $# -ge 2 ] || die "--data-dir needs a folder"; DATA=$2; shift ;;
        --port) [ $# -ge 2 ] || die "--port needs a number"; PORT=$2; shift ;;
        --ready-timeout) [ $# -ge 2 ] || die "--ready-timeout needs seconds"; READY_TIMEOUT=$2; shift ;;
        --memory-max) [ $# -ge 2 ] || die "--memory-max needs a size"; MEMORY_MAX=$2; shift ;;
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
check_folder --prefix "$PREFIX"
check_folder --data-dir "$DATA"
[ -z "$PORT" ] || check_number --port "$PORT" 65535
check_number --ready-timeout "$READY_TIMEOUT" 86400
[ -z "$MEMORY_MAX" ] || check_memory_max "$MEMORY_MAX"

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

# The unit as installed: this box's folders, and MemoryMax from --memory-max, else the installed unit's (an
# upgrade keeps what the admin chose), else the template's.
render_unit() {  # $1: the unit template
    memory=$MEMORY_MAX
    if [ -z "$memory" ] && [ -f "/etc/systemd/system/$UNIT" ]; then
        memory=$(sed -n 's/^MemoryMax=//p' "/etc/systemd/system/$UNIT" | tail -n 1)
        [ -z "$memory" ] || check_memory_max "$memory"
    fi
    sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@DATA_DIR@|$DATA|g" \
        -e "${memory:+s|^MemoryMax=.*|MemoryMax=$memory|}" "$1"
}

# Start the installed `current` and wait for /readyz. As a service: restart the unit. Otherwise (--check-start):
# a trial run in the background, stopped once it answers.
start_and_wait() {
    launcher="$PREFIX/current/bin/appliance"
    if [ "$SERVICE" = 1 ]; then
        render_unit "$PREFIX/current/etc/$UNIT" > "/etc/systemd/system/$UNIT.new"
        mv "/etc/systemd/system/$UNIT.new" "/etc/systemd/system/$UNIT"
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

# A failed install leaves nothing: its staging folder, and the folders it made for it when they are empty again.
cleanup_install() {
    rm -rf "$work"
    folder=$PREFIX
    while [ -n "$made" ] && rmdir "$folder" 2>/dev/null && [ "$folder" != "$made" ]; do
        folder=$(dirname "$folder")
    done
}

install_package() {
    if [ "$SERVICE" = 1 ]; then
        [ "$(id -u)" = 0 ] || die "a service install needs root (sudo); or use --prefix DIR --no-service"
        # systemd's own test for a booted system (sd_booted): a container may have systemctl but no systemd
        [ -d /run/systemd/system ] && command -v systemctl >/dev/null \
            || die "systemd is not running here: use --prefix DIR --no-service"
    fi
    previous=$(readlink "$PREFIX/current" 2>/dev/null || true)
    [ "$previous" != "$VERSION" ] || die "$VERSION is installed already in $PREFIX (uninstall first to reinstall)"
    made="" folder=$PREFIX  # the topmost folder this install makes
    while [ ! -e "$folder" ]; do made=$folder; folder=$(dirname "$folder"); done
    work="$PREFIX/.incoming-$VERSION.$$"
    trap cleanup_install EXIT
    trap 'exit 130' INT TERM
    mkdir -p "$PREFIX"
    # 0700: until its hash is known the unpacked tree is untrusted (a root install keeps modes, setuid included)
    mkdir -m 0700 "$work"
    mkdir "$work/tree"
    say "unpacking $VERSION ($FLAVOUR) into $PREFIX"
    read_checked "$work/tree" "$work"
    check_unpacked "$work/tree" || die "the unpacked files do not match SHA256SUMS"
    rm -rf "${PREFIX:?}/$VERSION"  # a half-installed earlier attempt of this version
    mv "$work/tree" "$PREFIX/$VERSION"
    rm -rf "$work"
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

# --purge deletes the data and settings folders, which --prefix and --data-dir name: only when they are what this
# product made there, and never a system folder or someone's home.
check_purge() {  # $1: a folder to delete (empty, or holding $2: a file that shows it is this product's)
    [ -e "$1" ] || return 0
    real=$(readlink -f "$1")
    case $real in
        /|/bin|/boot|/dev|/etc|/home|/lib*|/media|/mnt|/opt|/proc|/root|/run|/sbin|/srv|/sys|/tmp|/usr|/var)
            die "--purge refuses to delete $real (a system folder)" ;;
    esac
    case $(dirname "$real") in
        /|/usr|/var) die "--purge refuses to delete $real (a system folder)" ;;
    esac
    # every home but the appliance user's (its home is the data folder)
    if getent passwd | awk -F: -v real="$real" '$1 != "appliance" && $6 == real { f = 1 } END { exit !f }'; then
        die "--purge refuses to delete $real (a user's home)"
    fi
    if [ ! -d "$real" ] || [ -L "$1" ]; then
        die "--purge refuses to delete $1: not a folder (a link: delete its target yourself)"
    fi
    if [ -n "$(ls -A "$real")" ] && [ ! -f "$real/$2" ]; then
        die "--purge refuses to delete $real: it does not look like rag-appliance's (no $2); remove it yourself"
    fi
}

uninstall_package() {
    if [ ! -e "$PREFIX/current" ] && [ ! -d "$PREFIX" ]; then  # --purge after an uninstall: what it kept
        { [ "$PURGE" = 1 ] && { [ -e "$DATA" ] || [ -e "$ETC" ]; }; } || die "nothing is installed in $PREFIX"
    fi
    if [ "$PURGE" = 1 ]; then  # before anything is removed
        check_purge "$DATA" store.sqlite3
        check_purge "$ETC" appliance.toml
    fi
    if [ "$SERVICE" = 1 ]; then
        [ "$(id -u)" = 0 ] || die "uninstalling the service needs root (sudo)"
        systemctl disable --now --quiet "$UNIT" 2>/dev/null || true
        rm -f "/etc/systemd/system/$UNIT"
        systemctl daemon-reload 2>/dev/null || true
    fi
    for version in "$PREFIX"/*/bin/appliance; do  # this product's version folders only
        folder=${version%/bin/appliance}
        if [ -e "$version" ] && [ -f "$folder/SHA256SUMS" ]; then rm -rf "$folder"; fi
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

verify_package() {
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    trap 'exit 130' INT TERM
    read_checked "" "$scratch"
    say "the package is intact ($VERSION, $FLAVOUR, payload sha256 $PAYLOAD_SHA256)"
}

show_unit() {  # the unit an install with these options writes (not checked: the admin reads it)
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    tail -c +$((HEADER_BYTES + 1)) "$SELF" | tar -xzf - -C "$scratch" "./etc/$UNIT"
    render_unit "$scratch/etc/$UNIT"
}

case $COMMAND in
    install) install_package ;;
    uninstall) uninstall_package ;;
    verify) verify_package ;;
    unit) show_unit ;;
    info) printf 'rag-appliance %s %s payload-sha256 %s\n' "$VERSION" "$FLAVOUR" "$PAYLOAD_SHA256" ;;
    *) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$SELF" | sed '/^set /d'; [ "$COMMAND" = help ] || exit 1 ;;
esac
exit 0

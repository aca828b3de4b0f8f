#!/bin/sh
# rag-appliance launcher: the frozen server of this version with this version's models. The settings are the box's:
# <prefix>/etc/appliance.toml (a link to /etc/rag-appliance on a service install), unless APPLIANCE_CONFIG is set.
# The link `current` is resolved first, so a running server keeps its version's files when an upgrade moves it.
version_dir=$(dirname "$(dirname "$(readlink -f "$0")")")
prefix=$(dirname "$version_dir")
if [ -z "${APPLIANCE_CONFIG:-}" ] && [ -f "$prefix/etc/appliance.toml" ]; then
    APPLIANCE_CONFIG=$prefix/etc/appliance.toml
    export APPLIANCE_CONFIG
fi
APPLIANCE_MODELS_DIR=${APPLIANCE_MODELS_DIR:-$version_dir/models}
export APPLIANCE_MODELS_DIR
exec "$version_dir/app/appliance" "$@"

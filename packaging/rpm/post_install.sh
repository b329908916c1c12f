# %post, written out (%systemd_post semantics): $1 is 1 on install, 2 on upgrade.
# Directories with their modes (systemd-tmpfiles also creates them at every boot).
if [ -x /usr/bin/systemd-tmpfiles ]; then
    /usr/bin/systemd-tmpfiles --create podunit.conf >/dev/null 2>&1 || :
fi
# The network of a first install: `cni`, in a drop-in the package does not own, so an upgraded
# host, whose configuration never said it, keeps the host network.
if [ "$1" -eq 1 ] && [ ! -e /etc/podunit/config.d/50-network.yaml ]; then
    mkdir -p /etc/podunit/config.d
    cat > /etc/podunit/config.d/50-network.yaml <<'EOF'
# Written once, by the package's first install: pods get a network namespace and an address of
# their own (docs/networking.md). Upgrades never touch this file; delete it or set `network: host`
# here to share the host's network. Merged over /etc/podunit/config.yaml.
network: cni
EOF
    chmod 0644 /etc/podunit/config.d/50-network.yaml
fi
if [ "$1" -eq 1 ] && [ -x /usr/bin/systemctl ]; then
    # Enables podunit.target and podunit-sync.service through the shipped preset.
    /usr/bin/systemctl --no-reload preset podunit.target podunit-sync.service >/dev/null 2>&1 || :
fi
# Only on a running systemd (not in a chroot or an image build).
if [ -d /run/systemd/system ] && [ -x /usr/bin/systemctl ]; then
    /usr/bin/systemctl daemon-reload >/dev/null 2>&1 || :
    if [ "$1" -eq 1 ]; then
        /usr/bin/systemctl start podunit.target podunit-sync.service >/dev/null 2>&1 || :
    fi
fi

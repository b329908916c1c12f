# %post, written out (%systemd_post semantics): $1 is 1 on install, 2 on upgrade.
# Directories with their modes (systemd-tmpfiles also creates them at every boot).
if [ -x /usr/bin/systemd-tmpfiles ]; then
    /usr/bin/systemd-tmpfiles --create podunit.conf >/dev/null 2>&1 || :
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

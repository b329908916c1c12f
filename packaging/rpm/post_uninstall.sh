# %postun, written out (%systemd_postun_with_restart semantics): $1 is 0 on erase, 1 on upgrade.
if [ -d /run/systemd/system ] && [ -x /usr/bin/systemctl ]; then
    # The generator's units go away with it (erase) or are regenerated (upgrade).
    /usr/bin/systemctl daemon-reload >/dev/null 2>&1 || :
    if [ "$1" -ge 1 ]; then
        # The new reconciler restarts only the pods whose units changed; pods are never restarted here.
        /usr/bin/systemctl try-restart podunit-sync.service >/dev/null 2>&1 || :
    fi
fi
if [ "$1" -eq 0 ]; then
    # Erase is rpm's purge: podunit's own state goes, the administrator's /etc/pods.d stays.
    rm -rf /var/lib/podunit /run/podunit
    # What %post wrote at the first install.
    rm -f /etc/podunit/config.d/50-network.yaml
    rmdir /etc/podunit/config.d 2>/dev/null || :
fi

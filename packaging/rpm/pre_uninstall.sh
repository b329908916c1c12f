# %preun, written out (%systemd_preun semantics): $1 is 0 on erase, 1 on upgrade.
# On erase, stops every pod while /usr/bin/podunit (which their ExecStopPost= calls) still
# exists. Upgrades stop nothing: pods keep running through them.
if [ "$1" -eq 0 ] && [ -x /usr/bin/systemctl ]; then
    if [ -d /run/systemd/system ]; then
        /usr/bin/systemctl stop podunit-sync.service >/dev/null 2>&1 || :
        # Pod services are PartOf= podunit.target and every pod unit runs under podunit.slice.
        /usr/bin/systemctl stop podunit.target podunit.slice >/dev/null 2>&1 || :
        # A container killed at the end of its grace period leaves a failed unit: forget it.
        /usr/bin/systemctl reset-failed 'podunit-*' >/dev/null 2>&1 || :
    fi
    /usr/bin/systemctl --no-reload disable podunit.target podunit-sync.service >/dev/null 2>&1 || :
fi

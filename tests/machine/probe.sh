#!/bin/sh
# The "container" of the real-systemd tests: records what the process received, then behaves as told.
# Installed as /usr/local/bin/probe in the test rootfs. Everything goes to $PROBE_DIR/$PROBE/
# (PROBE_DIR defaults to /srv/probe, a 1777 directory), one set of files per start:
#   argv      this process's /proc/self/cmdline: NUL-separated, byte-exact ("/bin/sh", the script, args)
#   environ   this process's /proc/self/environ: NUL-separated, byte-exact
#   status    /proc/self/status (Uid, Gid, Groups, CapEff, CapBnd, NoNewPrivs, ...)
#   cwd       working directory
#   mountinfo /proc/self/mountinfo
#   cgroup    /proc/self/cgroup
#   limits    memory and cpu limits of the process's own cgroup, as "memory=<bytes|max>" and
#             "cpu=<quota> <period>", read from cgroup v2 (memory.max, cpu.max) or v1
#   starts    one line appended per start (so restarts can be counted)
# Then, by $PROBE_THEN: "sleep" (default: run until stopped), "exit:N" (exit with status N),
# "ignore-term" (ignore SIGTERM, run until SIGKILLed; records "term" in signals first),
# "term-log" (on SIGTERM append "term" to signals, the time to term-at, and exit 0).
set -u
: "${PROBE:?PROBE must name the probe}"
dir=${PROBE_DIR:-/srv/probe}/$PROBE
mkdir -p "$dir" 2>/dev/null
cat /proc/$$/cmdline > "$dir/argv.tmp" && mv "$dir/argv.tmp" "$dir/argv"
cat /proc/$$/environ > "$dir/environ"
cat /proc/$$/status > "$dir/status"
pwd > "$dir/cwd"
cat /proc/$$/mountinfo > "$dir/mountinfo"
cat /proc/$$/cgroup > "$dir/cgroup"

limits() {
    v2=$(sed -n 's/^0:://p' /proc/$$/cgroup)
    if [ -n "$v2" ] && [ -f "/sys/fs/cgroup$v2/memory.max" ]; then
        echo "memory=$(cat "/sys/fs/cgroup$v2/memory.max")"
        echo "cpu=$(cat "/sys/fs/cgroup$v2/cpu.max")"
        return
    fi
    m=$(sed -n 's/^[0-9]*:memory:\(.*\)/\1/p' /proc/$$/cgroup)
    c=$(sed -n 's/^[0-9]*:cpu:\(.*\)/\1/p; s/^[0-9]*:cpu,cpuacct:\(.*\)/\1/p' /proc/$$/cgroup)
    cpudir=/sys/fs/cgroup/cpu
    [ -d "$cpudir" ] || cpudir=/sys/fs/cgroup/cpu,cpuacct
    mem=$(cat "/sys/fs/cgroup/memory$m/memory.limit_in_bytes" 2>/dev/null || echo unknown)
    # cgroup v1 says "no limit" with a huge page-aligned number; v2 says "max".
    [ "$mem" = 9223372036854771712 ] && mem=max
    q=$(cat "$cpudir$c/cpu.cfs_quota_us" 2>/dev/null || echo unknown)
    p=$(cat "$cpudir$c/cpu.cfs_period_us" 2>/dev/null || echo unknown)
    [ "$q" = -1 ] && q=max
    echo "memory=$mem"
    echo "cpu=$q $p"
}
limits > "$dir/limits"
echo "$(date +%s.%N) $$" >> "$dir/starts"

case "${PROBE_THEN:-sleep}" in
    sleep)
        exec sleep infinity ;;
    exit:*)
        exit "${PROBE_THEN#exit:}" ;;
    ignore-term)
        trap 'echo term >> "$dir/signals"' TERM
        while :; do sleep 1; done ;;
    term-log)
        trap 'echo term >> "$dir/signals"; date +%s.%N >> "$dir/term-at"; exit 0' TERM
        while :; do sleep 1; done ;;
    *)
        echo "probe: unknown PROBE_THEN=$PROBE_THEN" >&2
        exit 100 ;;
esac

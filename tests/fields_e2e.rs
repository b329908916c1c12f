//! Mapped fields on a real systemd that no other suite shows from the running process: what the
//! kernel applied (cgroup values, capability sets, mount types), what the process received (the
//! downward API, optional sources), what systemd did at stop (the stop signal), and how probes
//! are timed (a startup probe holding liveness back, a timed-out exec probe, a gRPC probe). Each
//! expected value is computed here from Kubernetes' rules, never with podunit's own code.
//!
//! Needs root and systemd-nspawn (and python3-grpcio for the gRPC server); fails, never skips.
//! Run: `cargo test --test fields_e2e` (part of `make test-e2e`).

mod support;

use std::process::{Child, Command, Stdio};
use support::nspawn::Machine;
use support::pods::{Probe, SOON, ctr_unit, pod_unit, start_pods, start_sync, wait_state};

const NS: &str = "default";

/// A container that runs the probe (tests/machine/probe.sh) as `name`, on the host's root.
fn probe_container(container: &str, probe: &str, extra: &str) -> String {
    format!(
        "  - name: {container}\n    image: host\n    command: [\"/usr/local/bin/probe\"]\n    env:\n    - name: PROBE\n      value: {probe}\n{extra}"
    )
}

/// The kernel's value of `file` for `unit`'s cgroup: cgroup v2 if the unit has one there, else
/// the v1 `controller` hierarchy.
fn cgroup_value(m: &Machine, unit: &str, v2: &str, controller: &str, v1: &str) -> String {
    let script = format!(
        r#"cg=$(systemctl show -p ControlGroup --value -- '{unit}')
if [ -f "/sys/fs/cgroup$cg/{v2}" ]; then cat "/sys/fs/cgroup$cg/{v2}"
else cat "/sys/fs/cgroup/{controller}$cg/{v1}"; fi"#
    );
    m.sh_ok(&script).trim().to_string()
}

fn cgroup_v2(m: &Machine) -> bool {
    m.sh_ok("stat -f -c %T /sys/fs/cgroup").trim() == "cgroup2fs"
}

/// requests.cpu -> the cgroup's weight by the kubelet's formulas; limits.cpu -> the quota;
/// limits.memory -> the memory limit, and no swap.
#[test]
fn resources_reach_the_cgroup() {
    let m = Machine::boot("fields-resources");
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: res\nspec:\n  containers:\n{}{}",
        probe_container(
            "main",
            "res-main",
            "    resources:\n      requests:\n        cpu: 250m\n        memory: 32Mi\n      limits:\n        cpu: 500m\n        memory: 64Mi\n",
        ),
        probe_container("best", "res-best", "",),
    );
    m.write("/etc/pods.d/res.yaml", pod.as_bytes());
    start_pods(&m);
    Probe::new(&m, "res-main").wait_starts(1);
    Probe::new(&m, "res-best").wait_starts(1);
    let main = ctr_unit(NS, "res", "main");
    let best = ctr_unit(NS, "res", "best");

    // The kubelet: shares = max(milliCPU * 1024 / 1000, 2) (MilliCPUToShares); on cgroup v2
    // weight = 1 + (shares - 2) * 9999 / 262142 (CpuSharesToCpuWeight). systemd writes v1
    // cpu.shares from the weight as weight * 1024 / 100.
    let shares = |milli: u64| (milli * 1024 / 1000).max(2);
    let weight = |milli: u64| 1 + (shares(milli) - 2) * 9999 / 262142;
    let (w_main, w_best) = (weight(250), weight(0));
    assert_eq!((w_main, w_best), (10, 1), "the formulas' own values");
    let v2 = cgroup_v2(&m);
    let seen = |unit: &str| cgroup_value(&m, unit, "cpu.weight", "cpu", "cpu.shares");
    if v2 {
        assert_eq!(seen(&main), w_main.to_string());
        assert_eq!(seen(&best), w_best.to_string());
    } else {
        assert_eq!(seen(&main), (w_main * 1024 / 100).to_string());
        assert_eq!(seen(&best), (w_best * 1024 / 100).to_string());
    }
    // 500m: 50 ms of every 100 ms; 64Mi.
    let quota = cgroup_value(&m, &main, "cpu.max", "cpu", "cpu.cfs_quota_us");
    assert_eq!(quota, if v2 { "50000 100000" } else { "50000" });
    let memory = cgroup_value(&m, &main, "memory.max", "memory", "memory.limit_in_bytes");
    assert_eq!(memory, "67108864");
    // No swap: the kernel's swap limit on cgroup v2. On v1 systemd has no swap setting it can
    // write (MemorySwapMax= is v2 only), so what is shown there is the unit's own setting.
    if v2 {
        assert_eq!(
            cgroup_value(&m, &main, "memory.swap.max", "memory", ""),
            "0"
        );
    } else {
        assert_eq!(m.prop(&main, "MemorySwapMax"), "0");
    }
    assert_eq!(
        m.prop(&best, "MemorySwapMax"),
        "infinity",
        "no limit, no swap rule"
    );
}

/// The downward API in env (fieldRef, resourceFieldRef) and optional ConfigMap/Secret sources
/// that do not exist, in env and in volumes.
#[test]
fn env_from_the_downward_api_and_optional_sources() {
    let m = Machine::boot("fields-env");
    // The machine's network: give it an address and a default route, inside its own namespace,
    // so the node's primary address is known here (the source address of the default route).
    let leader = m.leader().to_string();
    for args in [
        // A veth pair with both ends in the machine (kernels without the dummy driver have it).
        &[
            "link", "add", "fields0", "type", "veth", "peer", "name", "fields1",
        ][..],
        &["addr", "add", "10.253.7.5/24", "dev", "fields0"],
        &["link", "set", "fields0", "up"],
        &["link", "set", "fields1", "up"],
        &[
            "route",
            "add",
            "default",
            "dev",
            "fields0",
            "src",
            "10.253.7.5",
        ],
    ] {
        let st = Command::new("nsenter")
            .args(["-t", &leader, "-n", "ip"])
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?} in the machine's network");
    }
    let node = m.sh_ok("hostname").trim().to_lowercase();
    let cores = m.sh_ok("nproc").trim().to_string();
    let env = r#"    - name: NODE
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: HOST_IP
      valueFrom: {fieldRef: {fieldPath: status.hostIP}}
    - name: SA
      valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}
    - name: LABEL
      valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}
    - name: MEM_MI
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    - name: CPU_M
      valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: 1m}}
    - name: CPU_LIMIT
      valueFrom: {resourceFieldRef: {resource: limits.cpu}}
    - name: MEM_REQUEST
      valueFrom: {resourceFieldRef: {resource: requests.memory, divisor: 1Mi}}
    - name: OPT_CM
      valueFrom: {configMapKeyRef: {name: absent-cm, key: k, optional: true}}
    - name: OPT_SECRET
      valueFrom: {secretKeyRef: {name: absent-secret, key: k, optional: true}}
    envFrom:
    - configMapRef: {name: absent-cm2, optional: true}
      prefix: FROM_
    resources:
      requests: {cpu: 250m}
      limits: {memory: 96Mi}
    volumeMounts:
    - {name: cm, mountPath: /opt-cm}
    - {name: secret, mountPath: /opt-secret}
"#;
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: dapi\n  labels: {{app: web}}\nspec:\n  serviceAccountName: builder\n  containers:\n{}  volumes:\n  - name: cm\n    configMap: {{name: absent-cm3, optional: true}}\n  - name: secret\n    secret: {{secretName: absent-secret2, optional: true}}\n",
        probe_container("main", "dapi", env)
    );
    m.write("/etc/pods.d/dapi.yaml", pod.as_bytes());
    start_pods(&m);
    let p = Probe::new(&m, "dapi");
    p.wait_starts(1);
    let env = |k: &str| p.env(k).map(|v| String::from_utf8(v).unwrap());
    assert_eq!(env("NODE").as_deref(), Some(node.as_str()));
    assert_eq!(env("POD_IP").as_deref(), Some("10.253.7.5"));
    assert_eq!(env("HOST_IP").as_deref(), Some("10.253.7.5"));
    assert_eq!(env("SA").as_deref(), Some("builder"));
    assert_eq!(env("LABEL").as_deref(), Some("web"));
    assert_eq!(env("MEM_MI").as_deref(), Some("96"));
    // No memory request: the API server defaults it to the limit.
    assert_eq!(env("MEM_REQUEST").as_deref(), Some("96"));
    assert_eq!(env("CPU_M").as_deref(), Some("250"));
    // No CPU limit: the node's allocatable CPU, whole cores rounded up by the divisor 1.
    assert_eq!(env("CPU_LIMIT").as_deref(), Some(cores.as_str()));
    // Optional and absent: the variables are not set at all (not set empty).
    assert_eq!(env("OPT_CM"), None);
    assert_eq!(env("OPT_SECRET"), None);
    let environ = String::from_utf8_lossy(&p.file("environ").unwrap()).into_owned();
    assert!(
        !environ.split('\0').any(|e| e.starts_with("FROM_")),
        "{environ}"
    );
    // Optional absent volumes are mounted, with no keys (the kubelet's atomic writer still
    // makes its `..data` link, which `ls` does not list).
    let pid = m.prop(&ctr_unit(NS, "dapi", "main"), "MainPID");
    for dir in ["/opt-cm", "/opt-secret"] {
        let listed = m.sh_ok(&format!("ls /proc/{pid}/root{dir}"));
        assert_eq!(listed, "", "{dir} is a volume without keys");
        let mounted = m.sh_ok(&format!("cat /proc/{pid}/mountinfo"));
        assert!(
            mounted.lines().any(|l| l.split(' ').nth(4) == Some(dir)),
            "{dir} is mounted:\n{mounted}"
        );
    }
}

/// The file system type of mount point `dir` in a probe's recorded mount table.
fn fstype(p: &Probe, dir: &str) -> String {
    let table = p.text("mountinfo").unwrap();
    let line = table
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir))
        .unwrap_or_else(|| panic!("{dir} not mounted:\n{table}"));
    line.split(" - ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

/// emptyDir on memory and on disk (what survives a stop and a reboot), and the downwardAPI
/// volume's files, byte for byte as the kubelet writes them.
#[test]
fn volumes_in_memory_and_downward_files() {
    let mut m = Machine::boot("fields-volumes");
    // One line per start: whether each emptyDir still had the last start's marker.
    let script = "echo \"mem=$([ -e /mem/m ] && echo kept || echo new) disk=$([ -e /disk/d ] && echo kept || echo new)\" >> /srv/probe/vols-log; \
                  echo x > /mem/m; echo x > /disk/d; exec /usr/local/bin/probe";
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {{app: web, tier: 'a"b'}}
  annotations: {{note: hi}}
spec:
  containers:
  - name: main
    image: host
    command: ["sh", "-c", {script:?}]
    env:
    - name: PROBE
      value: vols
    resources:
      limits: {{memory: 64Mi}}
    volumeMounts:
    - {{name: mem, mountPath: /mem}}
    - {{name: disk, mountPath: /disk}}
    - {{name: info, mountPath: /info}}
    - {{name: info2, mountPath: /info2}}
    - {{name: cmv, mountPath: /cmv}}
    - {{name: proj, mountPath: /proj}}
  volumes:
  - name: mem
    emptyDir: {{medium: Memory}}
  - name: disk
    emptyDir: {{}}
  - name: info
    downwardAPI:
      items:
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: app, fieldRef: {{fieldPath: "metadata.labels['app']"}}}}
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: mem, resourceFieldRef: {{containerName: main, resource: limits.memory, divisor: 1Mi}}}}
  - name: info2
    downwardAPI:
      defaultMode: 0440
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: own-mode, mode: 0400, fieldRef: {{fieldPath: metadata.name}}}}
  - name: cmv
    configMap:
      name: cfg
      items:
      - {{key: b, path: sub/b.txt}}
  - name: proj
    projected:
      defaultMode: 0640
      sources:
      - configMap: {{name: cfg, items: [{{key: a, path: cm-a}}]}}
      - downwardAPI: {{items: [{{path: pod-name, fieldRef: {{fieldPath: metadata.name}}}}]}}
      - secret: {{name: sec, items: [{{key: s, path: sec-s}}]}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
data:
  a: from-a
  b: from-b
---
apiVersion: v1
kind: Secret
metadata:
  name: sec
stringData:
  s: from-s
"#
    );
    m.write("/etc/pods.d/vols.yaml", pod.as_bytes());
    start_pods(&m);
    {
        let p = Probe::new(&m, "vols");
        p.wait_starts(1);
        assert_eq!(fstype(&p, "/mem"), "tmpfs", "medium: Memory");
        assert_ne!(fstype(&p, "/disk"), "tmpfs", "an emptyDir on disk");
    }

    // The kubelet's downward files: maps as sorted `key="value"` lines (Go's %q), no newline
    // at the end; single values as they are; mode 0644 (the default defaultMode).
    let unit = ctr_unit(NS, "vols", "main");
    let pid = m.prop(&unit, "MainPID");
    let file = |f: &str| m.sh_ok(&format!("cat /proc/{pid}/root/info/{f}"));
    assert_eq!(file("labels"), "app=\"web\"\ntier=\"a\\\"b\"");
    assert_eq!(file("annotations"), "note=\"hi\"");
    assert_eq!(file("app"), "web");
    assert_eq!(file("name"), "vols");
    assert_eq!(file("mem"), "64");
    let mode = |f: &str| {
        m.sh_ok(&format!("stat -L -c %a /proc/{pid}/root{f}"))
            .trim()
            .to_string()
    };
    assert_eq!(mode("/info/labels"), "644");
    // defaultMode, and an item's own mode over it.
    assert_eq!(mode("/info2/name"), "440");
    assert_eq!(mode("/info2/own-mode"), "400");
    // A configMap volume with items: only the listed keys, at their paths.
    let listed = m.sh_ok(&format!(
        "cd /proc/{pid}/root/cmv && find -L . -path './..*' -prune -o -print | sort"
    ));
    assert_eq!(listed, ".\n./sub\n./sub/b.txt\n");
    assert_eq!(
        m.sh_ok(&format!("cat /proc/{pid}/root/cmv/sub/b.txt")),
        "from-b"
    );
    // A projected volume: each source's items, every file with the volume's defaultMode.
    for (f, content) in [
        ("cm-a", "from-a"),
        ("pod-name", "vols"),
        ("sec-s", "from-s"),
    ] {
        assert_eq!(
            m.sh_ok(&format!("cat /proc/{pid}/root/proj/{f}")),
            content,
            "{f}"
        );
        assert_eq!(mode(&format!("/proj/{f}")), "640", "{f}");
    }

    // Stopped and started again: the memory emptyDir is new, the disk one kept.
    m.sh_ok(&format!("systemctl stop {}", pod_unit(NS, "vols")));
    wait_state(&m, &unit, &["inactive", "failed"]);
    m.sh_ok("systemctl start podunit.target");
    Probe::new(&m, "vols").wait_starts(2);
    // And after a reboot the same.
    m.reboot();
    m.sh_ok("systemctl start podunit.target");
    Probe::new(&m, "vols").wait_starts(3);
    assert_eq!(
        m.read_string("/srv/probe/vols-log").unwrap(),
        "mem=new disk=new\nmem=new disk=kept\nmem=new disk=kept\n"
    );
}

/// Required node affinity against the node's labels (the kubelet's admission), hostNetwork on a
/// node whose pods get private networks, and `serviceAccount`, the old name of
/// `serviceAccountName`.
#[test]
fn node_affinity_host_network_and_the_service_account_alias() {
    let m = Machine::boot("fields-node");
    m.write("/etc/podunit/config.yaml", b"network: private\n");
    let affinity = |os: &str| {
        format!(
            "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n          - {{key: kubernetes.io/os, operator: In, values: [{os}]}}\n"
        )
    };
    let pod = |name: &str, spec: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}  containers:\n{}---\n",
            probe_container(
                "main",
                name,
                "    - name: SA\n      valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}\n"
            )
        )
    };
    let all = [
        pod("fits", &affinity("linux")),
        pod("elsewhere", &affinity("windows")),
        pod("hostnet", "  hostNetwork: true\n"),
        pod("private", ""),
        pod("alias", "  serviceAccount: legacy\n"),
    ]
    .concat();
    m.write("/etc/pods.d/node.yaml", all.as_bytes());
    start_pods(&m);
    for p in ["fits", "hostnet", "private", "alias"] {
        Probe::new(&m, p).wait_starts(1);
    }
    // The pod this node does not fit is refused, with the kubelet's reason, and never runs.
    let table = m.wait_for("elsewhere to be refused", SOON, || {
        let t = m.sh_ok("podunit status");
        t.lines()
            .any(|l| l.split_whitespace().nth(1) == Some("elsewhere"))
            .then_some(t)
    });
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("elsewhere"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[3], "NodeAffinity", "{table}");
    assert_eq!(Probe::new(&m, "elsewhere").starts(), 0);

    // hostNetwork: the machine's own network namespace; the others: one of the pod's, with
    // only a loopback interface.
    let netns = |pid: &str| {
        m.sh_ok(&format!("readlink /proc/{pid}/ns/net"))
            .trim()
            .to_string()
    };
    let node_ns = netns("1");
    let main_pid = |pod: &str| m.prop(&ctr_unit(NS, pod, "main"), "MainPID");
    assert_eq!(netns(&main_pid("hostnet")), node_ns);
    let private = main_pid("private");
    assert_ne!(netns(&private), node_ns);
    let links = m.sh_ok(&format!(
        "tail -n +3 /proc/{private}/net/dev | cut -d: -f1 | tr -d ' '"
    ));
    assert_eq!(links, "lo\n");

    // serviceAccount alone names the account, as serviceAccountName does.
    let sa = |p: &str| {
        Probe::new(&m, p)
            .env("SA")
            .map(|v| String::from_utf8(v).unwrap())
    };
    assert_eq!(sa("alias").as_deref(), Some("legacy"));
    assert_eq!(sa("private").as_deref(), Some("default"));
}

/// The capability sets of a capability bit list, as /proc/PID/status shows them.
fn caps_hex(bits: &[u32]) -> String {
    format!("{:016x}", bits.iter().fold(0u64, |v, b| v | 1 << b))
}

/// capabilities.add for a non-root user: kept as ambient capabilities, so effective after exec.
#[test]
fn added_capabilities_for_a_non_root_user() {
    let m = Machine::boot("fields-caps");
    let sc = |add: &str| {
        format!(
            "    securityContext:\n      runAsUser: 1000\n      capabilities: {{add: [{add}]}}\n"
        )
    };
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: caps\nspec:\n  containers:\n{}{}",
        probe_container("added", "caps-added", &sc("NET_BIND_SERVICE, NET_RAW")),
        probe_container(
            "plain",
            "caps-plain",
            "    securityContext:\n      runAsUser: 1000\n"
        ),
    );
    m.write("/etc/pods.d/caps.yaml", pod.as_bytes());
    start_pods(&m);
    let added = Probe::new(&m, "caps-added");
    let plain = Probe::new(&m, "caps-plain");
    added.wait_starts(1);
    plain.wait_starts(1);
    // containerd's default set: AUDIT_WRITE 29, CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4,
    // KILL 5, MKNOD 27, NET_BIND_SERVICE 10, NET_RAW 13, SETFCAP 31, SETGID 6, SETPCAP 8,
    // SETUID 7, SYS_CHROOT 18.
    let default = caps_hex(&[29, 0, 1, 3, 4, 5, 27, 10, 13, 31, 6, 8, 7, 18]);
    let net = caps_hex(&[10, 13]);
    assert_eq!(added.status("CapBnd"), default);
    assert_eq!(added.status("CapAmb"), net);
    assert_eq!(added.status("CapEff"), net);
    assert_eq!(added.status("CapPrm"), net);
    assert_eq!(added.status("Uid"), "1000\t1000\t1000\t1000");
    // Without an add a non-root process has none (as under a runtime), whatever the bounding set.
    assert_eq!(plain.status("CapBnd"), default);
    for set in ["CapAmb", "CapEff", "CapPrm"] {
        assert_eq!(plain.status(set), caps_hex(&[]), "{set}");
    }
}

/// The gRPC health server (tests/grpc/health_server.py, Debian's python3-grpcio) in the
/// machine's network, serving `""` as SERVING; killed when dropped.
struct Health {
    child: Child,
    port: u16,
}

impl Health {
    fn start(m: &Machine) -> Health {
        support::registry::in_machine_network(m, || {
            let mut child = Command::new("/usr/bin/python3")
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/grpc/health_server.py"
                ))
                .arg("=1")
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3 with python3-grpcio");
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(child.stdout.take().unwrap()),
                &mut line,
            )
            .unwrap();
            let port = line.trim().parse().expect("the gRPC server's port");
            Health { child, port }
        })
    }
}

impl Drop for Health {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// lifecycle.stopSignal at stop; a startup probe holding liveness back; an exec probe killed
/// at its timeoutSeconds; a gRPC readiness probe flipping READY.
#[test]
fn stop_signal_and_probe_timing() {
    let m = Machine::boot("fields-timing");
    start_sync(&m);
    let grpc = Health::start(&m);
    m.sh_ok("mkdir -p /srv/t && chmod 0777 /srv/t");
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: timing
spec:
  containers:
  - name: signal
    image: host
    command: ["sh", "-c", "trap 'echo got-usr1 >> /srv/t/signals; exit 0' USR1; echo up > /srv/t/signal-up; while :; do sleep 1; done"]
    lifecycle:
      stopSignal: SIGUSR1
  - name: startup
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - {{name: PROBE, value: startup}}
    startupProbe:
      exec: {{command: ["test", "-e", "/srv/t/started"]}}
      periodSeconds: 1
      failureThreshold: 600
    livenessProbe:
      exec: {{command: ["false"]}}
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 2
  - name: slow
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - {{name: PROBE, value: slow}}
    livenessProbe:
      exec: {{command: ["sleep", "5"]}}
      timeoutSeconds: 1
      periodSeconds: 2
      failureThreshold: 1
      terminationGracePeriodSeconds: 2
  - name: grpc
    image: host
    command: ["sleep", "infinity"]
    readinessProbe:
      grpc: {{port: {port}}}
      periodSeconds: 1
      failureThreshold: 1
  - name: steady
    image: host
    command: ["sleep", "infinity"]
    readinessProbe:
      exec: {{command: ["sh", "-c", "echo run >> /srv/t/steady-runs; test -e /srv/t/steady-go"]}}
      periodSeconds: 2
      successThreshold: 3
  - name: graceful
    image: host
    command: ["sh", "-c", "trap 'date +%s.%N >> /srv/t/graceful-term' TERM; echo up > /srv/t/graceful-up; while :; do sleep 0.2; done"]
    livenessProbe:
      exec: {{command: ["test", "!", "-e", "/srv/t/graceful-up"]}}
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 3
  terminationGracePeriodSeconds: 60
"#,
        port = grpc.port
    );
    m.write("/etc/pods.d/timing.yaml", pod.as_bytes());
    m.daemon_reload();
    let startup = Probe::new(&m, "startup");
    let slow = Probe::new(&m, "slow");
    startup.wait_starts(1);
    let startup_unit = ctr_unit(NS, "timing", "startup");
    let first_pid = m.prop(&startup_unit, "MainPID");

    // A container's `ready`, as `podunit status -o json` says it.
    let ready = |container: &str| {
        let json = m.sh_ok("podunit status -o json");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let pod = v
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "timing")
            .cloned()
            .unwrap();
        pod["containerStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == container)
            .map(|c| c["ready"] == true)
            .unwrap_or(false)
    };
    let runs = || {
        m.read_string("/srv/t/steady-runs")
            .map_or(0, |r| r.lines().count())
    };

    // successThreshold 3: its probe fails until the test lets it pass; then the container is
    // ready only after three successes in a row (one every 2 s), not at the first.
    m.wait_for("the steady probe to have run", SOON, || {
        (runs() > 0).then_some(())
    });
    assert!(!ready("steady"), "ready before any success");
    let before = runs();
    m.sh_ok("touch /srv/t/steady-go");
    m.wait_for("steady to be ready", SOON, || ready("steady").then_some(()));
    let after = runs();
    assert!(
        after >= before + 3,
        "ready after {} runs since the probe could pass",
        after - before
    );

    // A liveness kill with the probe's own terminationGracePeriodSeconds (3 s), not the pod's
    // (60 s): SIGTERM (which the container ignores), then SIGKILL 3 s later.
    let term = m.wait_for("graceful to get SIGTERM", SOON, || {
        m.read_string("/srv/t/graceful-term")
    });
    let term: f64 = term.lines().next().unwrap().parse().unwrap();
    let graceful = ctr_unit(NS, "timing", "graceful");
    let killed = m.wait_for("graceful to be killed", SOON, || {
        let j = m.sh_ok(&format!(
            "journalctl --no-pager -o short-unix _PID=1 UNIT={graceful}"
        ));
        j.lines()
            .find(|l| l.contains("code=killed, status=9/KILL"))
            .map(|l| l.split_whitespace().next().unwrap().parse::<f64>().unwrap())
    });
    let grace = killed - term;
    assert!(
        (2.0..15.0).contains(&grace),
        "SIGKILL {grace:.1} s after SIGTERM: the probe's 3 s grace, not the pod's 60"
    );

    // timeoutSeconds: a probe command that would succeed after 5 s is a failure after 1 s,
    // so the container is killed and restarted.
    slow.wait_starts(2);

    // The gRPC server answers SERVING: the grpc container is ready; then the server goes away
    // and it is not ready any more.
    m.wait_for("the grpc container to be ready", SOON, || {
        ready("grpc").then_some(())
    });
    drop(grpc);
    m.wait_for("the grpc container to be unready", SOON, || {
        (!ready("grpc")).then_some(())
    });

    // The startup probe has failed all this time (the slow container restarted meanwhile), and
    // liveness, which always fails, has not run: the first process is still the main one.
    assert_eq!(m.prop(&startup_unit, "ActiveState"), "active");
    assert_eq!(
        m.prop(&startup_unit, "MainPID"),
        first_pid,
        "liveness waited for the startup probe"
    );
    assert_eq!(startup.starts(), 1);
    m.sh_ok("touch /srv/t/started");
    // Now liveness runs, fails, and the container is killed and started again.
    startup.wait_starts(2);

    // The stop signal: SIGUSR1 instead of SIGTERM, and the process exits on it.
    m.wait_for("the signal container to be up", SOON, || {
        m.read("/srv/t/signal-up").map(|_| ())
    });
    m.sh_ok(&format!(
        "systemctl stop {}",
        ctr_unit(NS, "timing", "signal")
    ));
    assert_eq!(
        m.read_string("/srv/t/signals").as_deref(),
        Some("got-usr1\n")
    );
}

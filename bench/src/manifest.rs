//! The benchmark's manifests: a pod as people write them (env, resources, volumes,
//! securityContext, an init container, sidecars), with the ConfigMap it uses in the same file.

pub const CONTAINERS: usize = 3;
pub const INIT_CONTAINERS: usize = 1;
/// Unit files each pod must produce at least: its slice, its pod service, one per container.
pub const UNITS_PER_POD: usize = 2 + CONTAINERS + INIT_CONTAINERS;

/// Pod number `i`; names differ so that no two pods collide.
pub fn pod(i: usize) -> String {
    let team = i % 7;
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: shop-{i:05}
  namespace: bench
  labels:
    app: shop
    instance: shop-{i:05}
    tier: backend
  annotations:
    example.com/owner: team-{team}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 20
  securityContext:
    runAsUser: 1000
    runAsGroup: 1000
    supplementalGroups: [100]
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  resources:
    limits:
      cpu: "2"
      memory: 1Gi
  volumes:
  - name: data
    emptyDir: {{}}
  - name: scratch
    emptyDir:
      medium: Memory
  - name: logs
    hostPath:
      path: /var/log/shop
      type: DirectoryOrCreate
  - name: config
    configMap:
      name: shop-{i:05}-config
  - name: podinfo
    downwardAPI:
      items:
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
      - path: mem-limit
        resourceFieldRef:
          containerName: server
          resource: limits.memory
          divisor: 1Mi
  initContainers:
  - name: migrate
    image: host
    command: [/bin/sh, -c]
    args: ["echo migrating $(POD_NAME) >> /data/migrations.log"]
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: DB_URL
      valueFrom:
        configMapKeyRef:
          name: shop-{i:05}-config
          key: db-url
    volumeMounts:
    - name: data
      mountPath: /data
    resources:
      limits:
        cpu: 200m
        memory: 64Mi
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: [ALL]
  containers:
  - name: server
    image: host
    command: [/usr/bin/python3, -m, http.server]
    args: ["--directory", "/srv/shop", "$(PORT)"]
    workingDir: /srv/shop
    env:
    - name: PORT
      value: "{port}"
    - name: MODE
      value: production
    - name: POD_UID
      valueFrom:
        fieldRef:
          fieldPath: metadata.uid
    - name: MEM_LIMIT
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
    envFrom:
    - configMapRef:
        name: shop-{i:05}-config
    volumeMounts:
    - name: data
      mountPath: /srv/shop/data
    - name: config
      mountPath: /etc/shop
      readOnly: true
    - name: podinfo
      mountPath: /etc/podinfo
    resources:
      requests:
        cpu: 250m
        memory: 128Mi
      limits:
        cpu: "1"
        memory: 512Mi
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: [ALL]
        add: [NET_BIND_SERVICE]
  - name: log-shipper
    image: host
    command: [/bin/sh, -c, "tail -F /var/log/shop/access.log"]
    env:
    - name: SHIPPER_TARGET
      value: "udp://127.0.0.1:5140"
    volumeMounts:
    - name: logs
      mountPath: /var/log/shop
      readOnly: true
    resources:
      requests:
        cpu: 50m
        memory: 32Mi
      limits:
        cpu: 100m
        memory: 64Mi
    securityContext:
      allowPrivilegeEscalation: false
  - name: cache
    image: host
    command: [/bin/sleep, infinity]
    env:
    - name: CACHE_DIR
      value: /scratch
    volumeMounts:
    - name: scratch
      mountPath: /scratch
    - name: data
      mountPath: /scratch/seed
      subPath: seed
    resources:
      limits:
        memory: 128Mi
    securityContext:
      runAsUser: 1001
      allowPrivilegeEscalation: false
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-{i:05}-config
  namespace: bench
data:
  db-url: "postgres://127.0.0.1:5432/shop"
  LOG_LEVEL: info
  shop.conf: |
    listen = {port}
    team = team-{team}
"#,
        port = 8000 + i % 1000,
    )
}

/// Pod number `i` as JSON documents (the format podunit-sync writes the spool in): the same
/// objects as [`pod`], one JSON document per object, separated by `---`.
pub fn pod_json(i: usize) -> String {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&pod(i)).expect("the benchmark's manifest is valid YAML");
    let mut out = String::new();
    for (n, d) in docs.iter().enumerate() {
        if n > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_json::to_string(d).expect("a JSON value serializes"));
        out.push('\n');
    }
    out
}

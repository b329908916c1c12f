//! A plugin's result (CNI 1.0.0, and the 0.3.x/0.4.0 form with `version` in each IP), read as
//! hostile input: bounded in size and in entries, every field checked, never a panic. From it,
//! the pod's IPs as `status.podIPs` lists them.

use serde_json::Value;
use std::fmt;
use std::net::IpAddr;

/// The most bytes of a result podunit reads (a real one is well under a kilobyte).
pub const MAX_BYTES: usize = 1 << 20;
/// The most entries in each list of a result.
pub const MAX_ENTRIES: usize = 1024;

/// A result podunit cannot read: why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultError(pub String);

impl fmt::Display for ResultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid CNI result: {}", self.0)
    }
}

impl std::error::Error for ResultError {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    /// The network namespace it is in; none for an interface on the host.
    pub sandbox: Option<String>,
}

/// An address with its prefix length, as in `10.0.0.2/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn parse(s: &str) -> Result<IpNet, ResultError> {
        let bad = || ResultError(format!("{s:?} is not an address with a prefix length"));
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(IpNet { addr, prefix })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
    /// Index into the result's interfaces.
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

impl CniResult {
    /// Reads a result from a plugin's stdout.
    pub fn parse(bytes: &[u8]) -> Result<CniResult, ResultError> {
        if bytes.len() > MAX_BYTES {
            return Err(ResultError(format!(
                "{} bytes, more than the {MAX_BYTES} allowed",
                bytes.len()
            )));
        }
        // serde_json's recursion limit bounds the nesting.
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| ResultError(format!("not JSON: {e}")))?;
        from_value(&v)
    }

    /// The pod's IPs as `status.podIPs`: the addresses of interface `ifname` in the pod's
    /// namespace (and those tied to no interface), at most one per family, IPv4 first.
    pub fn pod_ips(&self, ifname: &str) -> Vec<IpAddr> {
        let ours = |ip: &&IpConfig| match ip.interface {
            None => true,
            Some(i) => self
                .interfaces
                .get(i)
                .is_some_and(|itf| itf.name == ifname && itf.sandbox.is_some()),
        };
        let first = |v4: bool| {
            self.ips
                .iter()
                .filter(ours)
                .map(|ip| ip.address.addr)
                .find(|a| a.is_ipv4() == v4)
        };
        [first(true), first(false)].into_iter().flatten().collect()
    }
}

fn from_value(v: &Value) -> Result<CniResult, ResultError> {
    let obj = v
        .as_object()
        .ok_or_else(|| ResultError("not a JSON object".into()))?;
    let cni_version = string(obj.get("cniVersion"), "cniVersion")?
        .ok_or_else(|| ResultError("no cniVersion".into()))?;
    if !super::SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
        return Err(ResultError(format!(
            "cniVersion {cni_version:?} is not one of {:?}",
            super::SUPPORTED_VERSIONS
        )));
    }
    let interfaces = list(obj.get("interfaces"), "interfaces", |i, e| {
        let o = e
            .as_object()
            .ok_or_else(|| ResultError(format!("interfaces[{i}] is not an object")))?;
        let name = string(o.get("name"), "interface name")?
            .ok_or_else(|| ResultError(format!("interfaces[{i}] has no name")))?;
        Ok(Interface {
            name,
            mac: string(o.get("mac"), "mac")?,
            sandbox: string(o.get("sandbox"), "sandbox")?.filter(|s| !s.is_empty()),
        })
    })?;
    let ips = list(obj.get("ips"), "ips", |i, e| {
        let o = e
            .as_object()
            .ok_or_else(|| ResultError(format!("ips[{i}] is not an object")))?;
        let address = string(o.get("address"), "address")?
            .ok_or_else(|| ResultError(format!("ips[{i}] has no address")))?;
        let interface = match o.get("interface") {
            None | Some(Value::Null) => None,
            Some(n) => {
                let n = n.as_u64().and_then(|n| usize::try_from(n).ok());
                match n {
                    Some(n) if n < interfaces.len() => Some(n),
                    _ => {
                        return Err(ResultError(format!(
                            "ips[{i}].interface is not an index into the {} interfaces",
                            interfaces.len()
                        )));
                    }
                }
            }
        };
        Ok(IpConfig {
            address: IpNet::parse(&address)?,
            gateway: addr(o.get("gateway"), "gateway")?,
            interface,
        })
    })?;
    let routes = list(obj.get("routes"), "routes", |i, e| {
        let o = e
            .as_object()
            .ok_or_else(|| ResultError(format!("routes[{i}] is not an object")))?;
        let dst = string(o.get("dst"), "dst")?
            .ok_or_else(|| ResultError(format!("routes[{i}] has no dst")))?;
        Ok(Route {
            dst: IpNet::parse(&dst)?,
            gw: addr(o.get("gw"), "gw")?,
        })
    })?;
    let dns = match obj.get("dns") {
        None | Some(Value::Null) => Dns::default(),
        Some(Value::Object(d)) => {
            let strings = |k: &str| {
                list(d.get(k), k, |i, e| {
                    e.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| ResultError(format!("dns.{k}[{i}] is not a string")))
                })
            };
            Dns {
                nameservers: strings("nameservers")?,
                domain: string(d.get("domain"), "dns.domain")?,
                search: strings("search")?,
                options: strings("options")?,
            }
        }
        Some(_) => return Err(ResultError("dns is not an object".into())),
    };
    Ok(CniResult {
        cni_version,
        interfaces,
        ips,
        routes,
        dns,
    })
}

fn string(v: Option<&Value>, what: &str) -> Result<Option<String>, ResultError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ResultError(format!("{what} is not a string"))),
    }
}

fn addr(v: Option<&Value>, what: &str) -> Result<Option<IpAddr>, ResultError> {
    string(v, what)?
        .map(|s| {
            s.parse()
                .map_err(|_| ResultError(format!("{what} {s:?} is not an IP address")))
        })
        .transpose()
}

fn list<T>(
    v: Option<&Value>,
    what: &str,
    each: impl Fn(usize, &Value) -> Result<T, ResultError>,
) -> Result<Vec<T>, ResultError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) if a.len() > MAX_ENTRIES => Err(ResultError(format!(
            "{what} has {} entries, more than the {MAX_ENTRIES} allowed",
            a.len()
        ))),
        Some(Value::Array(a)) => a.iter().enumerate().map(|(i, e)| each(i, e)).collect(),
        Some(_) => Err(ResultError(format!("{what} is not a list"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRIDGE_1_0: &str = r#"{
      "cniVersion": "1.0.0",
      "interfaces": [
        {"name": "cni0", "mac": "aa:bb:cc:dd:ee:01"},
        {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:02"},
        {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": "/var/run/netns/p"}
      ],
      "ips": [
        {"address": "fd00:1::5/64", "gateway": "fd00:1::1", "interface": 2},
        {"address": "10.199.0.5/24", "gateway": "10.199.0.1", "interface": 2},
        {"address": "10.199.0.6/24", "interface": 2},
        {"address": "10.1.0.1/24", "interface": 0}
      ],
      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00:1::1"}],
      "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}
    }"#;

    #[test]
    fn a_1_0_result_is_read_whole() {
        let r = CniResult::parse(BRIDGE_1_0.as_bytes()).unwrap();
        assert_eq!(r.cni_version, "1.0.0");
        assert_eq!(r.interfaces.len(), 3);
        assert_eq!(r.interfaces[2].sandbox.as_deref(), Some("/var/run/netns/p"));
        assert_eq!(r.interfaces[0].sandbox, None);
        assert_eq!(r.ips[1].address.to_string(), "10.199.0.5/24");
        assert_eq!(r.ips[1].gateway, Some("10.199.0.1".parse().unwrap()));
        assert_eq!(r.ips[1].interface, Some(2));
        assert_eq!(r.routes[1].gw, Some("fd00:1::1".parse().unwrap()));
        assert_eq!(r.dns.nameservers, ["10.96.0.10"]);
        assert_eq!(r.dns.search, ["svc.cluster.local"]);
    }

    #[test]
    fn pod_ips_are_one_per_family_ipv4_first_on_the_pods_interface() {
        let r = CniResult::parse(BRIDGE_1_0.as_bytes()).unwrap();
        let want: Vec<IpAddr> = vec!["10.199.0.5".parse().unwrap(), "fd00:1::5".parse().unwrap()];
        assert_eq!(r.pod_ips("eth0"), want);
        // The bridge's own address (a host interface) is never the pod's.
        assert!(r.pod_ips("cni0").is_empty());
    }

    #[test]
    fn a_0_4_result_with_versions_in_its_ips_is_read() {
        let r = CniResult::parse(
            br#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.2.0.7/16"}]}"#,
        )
        .unwrap();
        assert_eq!(r.pod_ips("eth0"), ["10.2.0.7".parse::<IpAddr>().unwrap()]);
        assert!(r.interfaces.is_empty() && r.routes.is_empty());
    }

    #[test]
    fn malformed_results_are_errors_that_say_what() {
        for (input, says) in [
            ("", "not JSON"),
            ("[]", "not a JSON object"),
            ("{}", "no cniVersion"),
            (r#"{"cniVersion":"0.2.0"}"#, "is not one of"),
            (r#"{"cniVersion":1}"#, "cniVersion is not a string"),
            (r#"{"cniVersion":"1.0.0","ips":{}}"#, "ips is not a list"),
            (
                r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1"}]}"#,
                "prefix length",
            ),
            (
                r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/33"}]}"#,
                "prefix length",
            ),
            (
                r#"{"cniVersion":"1.0.0","ips":[{"address":"x/3"}]}"#,
                "prefix length",
            ),
            (
                r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/8","interface":0}]}"#,
                "not an index",
            ),
            (
                r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/8","interface":-1}]}"#,
                "not an index",
            ),
            (
                r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/8","gateway":"nope"}]}"#,
                "not an IP address",
            ),
            (r#"{"cniVersion":"1.0.0","interfaces":[{}]}"#, "has no name"),
            (
                r#"{"cniVersion":"1.0.0","routes":[{"gw":"1.2.3.4"}]}"#,
                "has no dst",
            ),
            (r#"{"cniVersion":"1.0.0","dns":[]}"#, "dns is not an object"),
            (
                r#"{"cniVersion":"1.0.0","dns":{"search":[1]}}"#,
                "dns.search[0]",
            ),
        ] {
            let e = CniResult::parse(input.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(says), "{input}: {e}");
        }
    }

    #[test]
    fn oversized_and_deep_inputs_are_refused_without_a_panic() {
        let big = format!(
            r#"{{"cniVersion":"1.0.0","x":"{}"}}"#,
            "a".repeat(MAX_BYTES)
        );
        assert!(
            CniResult::parse(big.as_bytes())
                .unwrap_err()
                .0
                .contains("more than")
        );
        let many = format!(
            r#"{{"cniVersion":"1.0.0","routes":[{}]}}"#,
            vec![r#"{"dst":"0.0.0.0/0"}"#; MAX_ENTRIES + 1].join(",")
        );
        assert!(
            CniResult::parse(many.as_bytes())
                .unwrap_err()
                .0
                .contains("entries")
        );
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(CniResult::parse(deep.as_bytes()).is_err());
    }
}

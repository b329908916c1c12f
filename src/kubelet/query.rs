//! The query of `/containerLogs` as the kubelet reads it (`PodLogOptions`), checked the same way.

use super::http::Request;
use crate::logs::LogOptions;

/// What a log request asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    pub options: LogOptions,
    pub previous: bool,
}

/// Go's `strconv.ParseBool`.
fn go_bool(name: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{name}: invalid boolean {v:?}")),
    }
}

fn int(name: &str, v: &str) -> Result<i64, String> {
    v.parse()
        .map_err(|_| format!("{name}: invalid integer {v:?}"))
}

/// Parses and validates the query; `now_micros` turns `sinceSeconds` into a time.
pub fn log_query(req: &Request, now_micros: i64) -> Result<LogQuery, String> {
    let mut q = LogQuery::default();
    let o = &mut q.options;
    let get = |n: &str| req.param(n).filter(|v| !v.is_empty());
    if let Some(v) = get("follow") {
        o.follow = go_bool("follow", v)?;
    }
    if let Some(v) = get("previous") {
        q.previous = go_bool("previous", v)?;
    }
    if let Some(v) = get("timestamps") {
        o.timestamps = go_bool("timestamps", v)?;
    }
    if let Some(v) = get("tailLines") {
        let n = int("tailLines", v)?;
        if n < 0 {
            return Err("tailLines: must be greater than or equal to 0".into());
        }
        o.tail_lines = Some(n as u64);
    }
    if let Some(v) = get("limitBytes") {
        let n = int("limitBytes", v)?;
        if n < 1 {
            return Err("limitBytes: must be greater than 0".into());
        }
        o.limit_bytes = Some(n as u64);
    }
    let since_seconds = get("sinceSeconds");
    let since_time = get("sinceTime");
    if since_seconds.is_some() && since_time.is_some() {
        return Err("at most one of sinceTime or sinceSeconds may be specified".into());
    }
    if let Some(v) = since_seconds {
        let n = int("sinceSeconds", v)?;
        if n < 1 {
            return Err("sinceSeconds: must be greater than 0".into());
        }
        o.since_micros = Some(now_micros.saturating_sub(n.saturating_mul(1_000_000)));
    }
    if let Some(v) = since_time {
        let t: k8s_openapi::jiff::Timestamp = v
            .parse()
            .map_err(|_| format!("sinceTime: invalid RFC 3339 time {v:?}"))?;
        // metav1.Time has whole seconds.
        o.since_micros = Some(t.as_second().saturating_mul(1_000_000));
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(q: &str) -> Request {
        let raw = format!("GET /containerLogs/a/b/c?{q} HTTP/1.1\r\n\r\n");
        super::super::http::parse_head(raw.as_bytes())
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn every_option_parses() {
        let q = log_query(
            &req("follow=true&previous=1&timestamps=T&tailLines=10&limitBytes=500&sinceSeconds=5"),
            100_000_000,
        )
        .unwrap();
        assert!(q.previous);
        assert_eq!(
            q.options,
            LogOptions {
                follow: true,
                tail_lines: Some(10),
                since_micros: Some(95_000_000),
                timestamps: true,
                limit_bytes: Some(500),
                invocation: None,
            }
        );
        let t = log_query(&req("sinceTime=2023-11-14T22:13:20Z"), 0).unwrap();
        assert_eq!(t.options.since_micros, Some(1_700_000_000_000_000));
        assert_eq!(log_query(&req(""), 0).unwrap(), LogQuery::default());
    }

    #[test]
    fn bad_values_are_refused_as_the_kubelet_does() {
        for q in [
            "follow=yes",
            "tailLines=-1",
            "tailLines=x",
            "limitBytes=0",
            "sinceSeconds=0",
            "sinceTime=yesterday",
            "sinceSeconds=1&sinceTime=2023-11-14T22:13:20Z",
        ] {
            assert!(log_query(&req(q), 0).is_err(), "{q}");
        }
    }
}

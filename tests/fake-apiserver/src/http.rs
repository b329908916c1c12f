//! Just enough HTTP/1.1: requests with Content-Length or chunked bodies, keep-alive, and chunked
//! responses for watches.

use crate::util::percent_decode;
use std::io::{self, BufRead, Read, Write};

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean query parameter as the API reads them: `1`, `true`.
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("1" | "true" | "True"))
    }

    pub fn keep_alive(&self) -> bool {
        !self
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"))
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn read_line<R: BufRead>(r: &mut R, budget: &mut usize) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(*budget as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if n > *budget {
        return Err(bad("request head too large"));
    }
    *budget -= n;
    while line.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| bad("request head is not UTF-8"))
}

/// Reads one request; `Ok(None)` when the client closed the connection between requests.
pub fn read_request<R: BufRead>(r: &mut R) -> io::Result<Option<Request>> {
    let mut budget = MAX_HEAD;
    let Some(first) = read_line(r, &mut budget)? else {
        return Ok(None);
    };
    let mut parts = first.split_whitespace();
    let (Some(method), Some(target), Some(_version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("malformed request line"));
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    let mut req = Request {
        method: method.to_string(),
        path: percent_decode(path),
        query,
        ..Request::default()
    };
    loop {
        let line = read_line(r, &mut budget)?.ok_or_else(|| bad("truncated request head"))?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| bad("malformed header"))?;
        req.headers
            .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    if req
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        req.body = read_chunked(r)?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad content-length"))?;
        if len > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        req.body = body;
    }
    Ok(Some(req))
}

fn read_chunked<R: BufRead>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut budget = 1024;
        let line = read_line(r, &mut budget)?.ok_or_else(|| bad("truncated chunk"))?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            // Trailers, then the blank line.
            while !read_line(r, &mut budget)?.unwrap_or_default().is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf)?;
    }
}

pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

pub fn write_response<W: Write>(
    w: &mut W,
    code: u16,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
) -> io::Result<()> {
    let conn = if keep_alive { "keep-alive" } else { "close" };
    // The API server tells throttled and unavailable clients when to come back.
    let retry = if code == 429 || code == 503 {
        "Retry-After: 1\r\n"
    } else {
        ""
    };
    write!(
        w,
        "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-cache, private\r\n{retry}Connection: {conn}\r\n\r\n",
        reason_phrase(code),
        body.len()
    )?;
    w.write_all(body)?;
    w.flush()
}

/// Starts a chunked 200 response (a watch stream).
pub fn start_chunked<W: Write>(w: &mut W, content_type: &str) -> io::Result<()> {
    write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n"
    )?;
    w.flush()
}

pub fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> io::Result<()> {
    write!(w, "{:x}\r\n", data.len())?;
    w.write_all(data)?;
    w.write_all(b"\r\n")?;
    w.flush()
}

pub fn end_chunked<W: Write>(w: &mut W) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests_with_both_body_framings() {
        let raw = b"PATCH /api/v1/namespaces/default/pods/a%2Db/status?fieldSelector=spec.nodeName%3Dn1&watch=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let mut r = io::BufReader::new(&raw[..]);
        let a = read_request(&mut r).unwrap().unwrap();
        assert_eq!(a.method, "PATCH");
        assert_eq!(a.path, "/api/v1/namespaces/default/pods/a-b/status");
        assert_eq!(a.param("fieldSelector"), Some("spec.nodeName=n1"));
        assert!(a.flag("watch"));
        assert_eq!(a.body, b"{}");
        let b = read_request(&mut r).unwrap().unwrap();
        assert_eq!(b.body, b"abcde");
        assert!(read_request(&mut r).unwrap().is_none());
    }

    #[test]
    fn refuses_garbage() {
        let mut r = io::BufReader::new(&b"NONSENSE\r\n\r\n"[..]);
        assert!(read_request(&mut r).is_err());
    }
}

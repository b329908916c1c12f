//! The little of HTTP/1.1 the kubelet API needs: a request head parsed from bytes (bounded:
//! a head is hostile input), and responses written whole or streamed until the connection closes.

use std::io::{self, Read, Write};

/// The most a request head may take (Go's default `MaxHeaderBytes` is 1 MiB; the API server's
/// proxied requests are far smaller).
pub const MAX_HEAD: usize = 16 * 1024;
/// The most header lines a request may have.
pub const MAX_HEADERS: usize = 64;
/// The most request body read (and thrown away): the API's endpoints take none.
const MAX_BODY: u64 = 64 * 1024;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// Percent-decoded path.
    pub path: String,
    /// Decoded query pairs, in order.
    pub query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// HTTP/1.0, or `Connection: close`.
    pub close: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The last value of a query parameter (as Go's `url.Values.Get` takes the first; the
    /// API server sends each once).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request head was refused; each is answered with its status and the connection closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    TooLarge,
    Malformed(&'static str),
}

impl HeadError {
    pub fn status(&self) -> u16 {
        match self {
            HeadError::TooLarge => 431,
            HeadError::Malformed(_) => 400,
        }
    }
}

/// Parses the head at the start of `buf`: Ok(None) while it is incomplete, else the request and
/// the head's length.
pub fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize)>, HeadError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Err(HeadError::TooLarge)
        } else {
            Ok(None)
        };
    };
    if end + 4 > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| HeadError::Malformed("not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap_or_default();
    let mut parts = start.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed("request line"));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HeadError::Malformed("method"));
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(HeadError::Malformed("version")),
    };
    if !target.starts_with('/') {
        return Err(HeadError::Malformed("target"));
    }
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let path = percent_decode(raw_path, false).ok_or(HeadError::Malformed("path"))?;
    let mut query = Vec::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        query.push((
            percent_decode(k, true).ok_or(HeadError::Malformed("query"))?,
            percent_decode(v, true).ok_or(HeadError::Malformed("query"))?,
        ));
    }
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == MAX_HEADERS {
            return Err(HeadError::TooLarge);
        }
        let (name, value) = line.split_once(':').ok_or(HeadError::Malformed("header"))?;
        if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(HeadError::Malformed("header name"));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let connection = headers
        .iter()
        .find(|(n, _)| n == "connection")
        .map(|(_, v)| v.to_ascii_lowercase());
    let close = match connection.as_deref() {
        Some("close") => true,
        Some("keep-alive") => false,
        _ => http10,
    };
    Ok(Some((
        Request {
            method: method.to_string(),
            path,
            query,
            headers,
            close,
        },
        end + 4,
    )))
}

/// `%XX` decoding (and `+` as a space in a query); None for a bad escape or a result that is not
/// UTF-8, or a NUL.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                out.push(v);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}

/// Reads one request head from `r`, keeping what follows it in `buf`. Ok(None): the peer closed
/// the connection before a new request began.
pub fn read_request(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<Option<Request>, ReadError> {
    let mut chunk = [0u8; 4096];
    loop {
        match parse_head(buf) {
            Ok(Some((req, used))) => {
                buf.drain(..used);
                discard_body(r, buf, &req)?;
                return Ok(Some(req));
            }
            Ok(None) => {}
            Err(e) => return Err(ReadError::Head(e)),
        }
        let n = r.read(&mut chunk).map_err(ReadError::Io)?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(ReadError::Head(HeadError::Malformed("truncated")))
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reading a request failed: a bad head (answered, then closed) or the connection.
#[derive(Debug)]
pub enum ReadError {
    Head(HeadError),
    Io(io::Error),
}

fn discard_body(r: &mut impl Read, buf: &mut Vec<u8>, req: &Request) -> Result<(), ReadError> {
    if req.header("transfer-encoding").is_some() {
        return Err(ReadError::Head(HeadError::Malformed("chunked body")));
    }
    let len: u64 = match req.header("content-length") {
        None => 0,
        Some(v) => v
            .parse()
            .map_err(|_| ReadError::Head(HeadError::Malformed("content-length")))?,
    };
    if len > MAX_BODY {
        return Err(ReadError::Head(HeadError::TooLarge));
    }
    let have = (buf.len() as u64).min(len);
    buf.drain(..have as usize);
    let mut rest = len - have;
    let mut sink = [0u8; 4096];
    while rest > 0 {
        let n = r
            .read(&mut sink[..rest.min(4096) as usize])
            .map_err(ReadError::Io)?;
        if n == 0 {
            return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        rest -= n as u64;
    }
    Ok(())
}

/// The reason phrase of the statuses this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// A whole response with its length (the connection may carry another request).
pub fn write_response(
    w: &mut impl Write,
    status: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    write_response_with(w, status, &[], content_type, body, close)
}

/// [`write_response`] with further header lines (`Name: value`, each without its line end).
pub fn write_response_with(
    w: &mut impl Write,
    status: u16,
    extra: &[&str],
    content_type: &str,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let extra: String = extra.iter().map(|h| format!("{h}\r\n")).collect();
    let head = format!(
        "HTTP/1.1 {status} {}\r\n{extra}Content-Type: {content_type}\r\nContent-Length: {}\r\n{}\r\n",
        reason(status),
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    );
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// The head of a streamed response: its body ends when the connection closes.
pub fn write_stream_head(w: &mut impl Write, content_type: &str) -> io::Result<()> {
    let head =
        format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n");
    w.write_all(head.as_bytes())?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_parses_with_its_query() {
        let raw = b"GET /containerLogs/default/web/main?follow=true&tailLines=5&sinceTime=2026-01-01T00%3A00%3A00Z HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\nrest";
        let (r, used) = parse_head(raw).unwrap().unwrap();
        assert_eq!(&raw[used..], b"rest");
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/containerLogs/default/web/main");
        assert_eq!(r.param("follow"), Some("true"));
        assert_eq!(r.param("tailLines"), Some("5"));
        assert_eq!(r.param("sinceTime"), Some("2026-01-01T00:00:00Z"));
        assert_eq!(r.header("authorization"), Some("Bearer abc"));
        assert!(!r.close);
    }

    #[test]
    fn incomplete_heads_wait_and_bad_ones_are_refused() {
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        let big = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(parse_head(&big), Err(HeadError::TooLarge));
        for bad in [
            &b"GET /\r\n\r\n"[..],
            b"get / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2\r\n\r\n",
            b"GET x HTTP/1.1\r\n\r\n",
            b"GET /%zz HTTP/1.1\r\n\r\n",
            b"GET /%00 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\r\nbad name: x\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(bad), Err(HeadError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&many), Err(HeadError::TooLarge));
    }

    #[test]
    fn connection_close_and_http10() {
        let (r, _) = parse_head(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(r.close);
        let (r, _) = parse_head(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.close);
    }

    #[test]
    fn bodies_are_skipped_and_requests_follow_each_other() {
        let raw = b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\n";
        let mut r = &raw[..];
        let mut buf = Vec::new();
        assert_eq!(read_request(&mut r, &mut buf).unwrap().unwrap().path, "/a");
        assert_eq!(read_request(&mut r, &mut buf).unwrap().unwrap().path, "/b");
        assert!(read_request(&mut r, &mut buf).unwrap().is_none());
    }
}

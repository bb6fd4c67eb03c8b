//! A blocking HTTP/1.1 client for a job service speaking Harbor 0.26's API: one connection per
//! request, `Harbor-API-Version` and the bearer key (`HARBOR_API_KEY`) on each, bodies read by
//! `Content-Length`, chunked, or to the close, never past a limit.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use serde_json::Value;

/// Harbor's API version, sent with every request.
const API_VERSION: &str = "2026-10-30";

/// The most a JSON answer may hold.
pub const JSON_LIMIT: u64 = 64 << 20;

/// Why a request to the server got no answer we can use.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("`{0}` is not an http:// URL (host and port, no path)")]
    BadUrl(String),
    #[error("cannot reach {addr}: {source}")]
    Unreachable { addr: String, source: std::io::Error },
    #[error("the server answered HTTP {status}: {detail}")]
    Refused { status: u16, detail: String },
    #[error("the server's answer is not HTTP/1.1 this client reads: {0}")]
    Garbled(String),
    #[error("the server's answer is over {0} bytes")]
    TooLarge(u64),
}

/// `host:port` of an `http://` URL.
pub fn address(url: &str) -> Result<String, RemoteError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| RemoteError::BadUrl(url.into()))?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains(['/', '?', '#', '@']) {
        return Err(RemoteError::BadUrl(url.into()));
    }
    let has_port = host.rsplit_once(':').is_some_and(|(_, p)| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    Ok(if has_port && !host.ends_with(']') { host.to_string() } else { format!("{host}:80") })
}

/// Percent-encodes a query value.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One request; its status and body (at most `limit` bytes).
pub fn call(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
    limit: u64,
) -> Result<(u16, Vec<u8>), RemoteError> {
    let unreachable = |source| RemoteError::Unreachable { addr: addr.to_string(), source };
    // Each address the name resolves to, in turn (`localhost` may give `::1` first).
    let mut last = std::io::Error::other("no address");
    let mut connected = None;
    for socket in std::net::ToSocketAddrs::to_socket_addrs(addr).map_err(unreachable)? {
        match std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(10)) {
            Ok(stream) => {
                connected = Some(stream);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut stream = connected.ok_or_else(|| unreachable(last))?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(unreachable)?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nHarbor-API-Version: {API_VERSION}\r\nHarbor-Client: cli\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if let Ok(token) = std::env::var("HARBOR_API_KEY")
        && !token.is_empty()
    {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(key) = key {
        head.push_str(&format!("Idempotency-Key: {key}\r\n"));
    }
    stream.write_all(format!("{head}\r\n{body}").as_bytes()).map_err(unreachable)?;
    read_response(BufReader::new(stream), limit).map_err(|e| match e {
        Broken::Io(source) => unreachable(source),
        Broken::Garbled(what) => RemoteError::Garbled(what),
        Broken::TooLarge => RemoteError::TooLarge(limit),
    })
}

enum Broken {
    Io(std::io::Error),
    Garbled(String),
    TooLarge,
}

/// The longest status line, header line or chunk-size line read.
const LINE_LIMIT: u64 = 16 << 10;

/// One line, at most [`LINE_LIMIT`] bytes of it.
fn read_line(reader: &mut impl BufRead, line: &mut String) -> Result<usize, Broken> {
    line.clear();
    let n = reader.take(LINE_LIMIT).read_line(line).map_err(Broken::Io)?;
    if n as u64 == LINE_LIMIT && !line.ends_with('\n') {
        return Err(Broken::Garbled("a line over 16 KiB".into()));
    }
    Ok(n)
}

fn read_response(mut reader: impl BufRead, limit: u64) -> Result<(u16, Vec<u8>), Broken> {
    let mut line = String::new();
    read_line(&mut reader, &mut line)?;
    let status: u16 = line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Broken::Garbled(format!("status line {:?}", line.trim_end())))?;
    let (mut length, mut chunked) = (None, false);
    loop {
        if read_line(&mut reader, &mut line)? == 0 {
            return Err(Broken::Garbled("the headers end early".into()));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else { continue };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse::<u64>().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            read_line(&mut reader, &mut line)?;
            let size = line.trim_end().split(';').next().unwrap_or("");
            let size =
                u64::from_str_radix(size.trim(), 16).map_err(|_| Broken::Garbled(format!("chunk size {size:?}")))?;
            if size == 0 {
                break;
            }
            if size > limit.saturating_sub(body.len() as u64) {
                return Err(Broken::TooLarge);
            }
            let before = body.len();
            (&mut reader).take(size).read_to_end(&mut body).map_err(Broken::Io)?;
            if (body.len() - before) as u64 != size {
                return Err(Broken::Garbled("a chunk ends early".into()));
            }
            read_line(&mut reader, &mut line)?;
        }
    } else {
        if length.is_some_and(|n| n > limit) {
            return Err(Broken::TooLarge);
        }
        let want = length.unwrap_or(limit + 1);
        reader.take(want).read_to_end(&mut body).map_err(Broken::Io)?;
        if body.len() as u64 > limit {
            return Err(Broken::TooLarge);
        }
        if length.is_some_and(|n| n != body.len() as u64) {
            return Err(Broken::Garbled(format!("the body ends after {} bytes of {want}", body.len())));
        }
    }
    Ok((status, body))
}

/// One request whose answer is JSON; an error status is [`RemoteError::Refused`] with its detail.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> Result<Value, RemoteError> {
    let (status, bytes) = call(addr, method, path, body, key, JSON_LIMIT)?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if (200..300).contains(&status) && !answer.is_object() {
        return Err(RemoteError::Garbled(format!("HTTP {status} without a JSON object")));
    }
    if !(200..300).contains(&status) {
        let detail = answer["detail"]
            .as_str()
            .map_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect(), str::to_string);
        return Err(RemoteError::Refused { status, detail });
    }
    Ok(answer)
}

/// A registered file's bytes (`GET /download?uri=`), at most `limit`.
pub fn download(addr: &str, uri: &str, limit: u64) -> Result<Vec<u8>, RemoteError> {
    let (status, bytes) = call(addr, "GET", &format!("/download?uri={}", encode(uri)), None, None, limit)?;
    if status != 200 {
        let detail = String::from_utf8_lossy(&bytes).chars().take(200).collect();
        return Err(RemoteError::Refused { status, detail });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_host_and_port_urls_are_taken() {
        assert_eq!(address("http://127.0.0.1:8390").unwrap(), "127.0.0.1:8390");
        assert_eq!(address("http://127.0.0.1:8390/").unwrap(), "127.0.0.1:8390");
        assert_eq!(address("http://example.com").unwrap(), "example.com:80");
        for bad in ["https://x:1", "127.0.0.1:8390", "http://x:1/api", "http://u@x:1", "http://"] {
            assert!(matches!(address(bad), Err(RemoteError::BadUrl(_))), "{bad}");
        }
    }

    fn read(text: &str, limit: u64) -> Result<(u16, Vec<u8>), Broken> {
        read_response(text.as_bytes(), limit)
    }

    #[test]
    fn bodies_are_read_by_length_chunks_or_to_the_close_and_never_past_the_limit() {
        let (status, body) = read("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello and more", 100).ok().unwrap();
        assert_eq!((status, body.as_slice()), (200, b"hello".as_slice()));
        let chunked =
            "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let (status, body) = read(chunked, 100).ok().unwrap();
        assert_eq!((status, body.as_slice()), (404, b"abcde".as_slice()));
        let (_, body) = read("HTTP/1.0 200 OK\r\n\r\nto the close", 100).ok().unwrap();
        assert_eq!(body, b"to the close");
        assert!(matches!(read("HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\nx", 100), Err(Broken::TooLarge)));
        assert!(matches!(read("HTTP/1.1 200 OK\r\n\r\n0123456789", 5), Err(Broken::TooLarge)));
        assert!(matches!(read(&chunked.replace("3\r\nabc", "63\r\nabc"), 10), Err(Broken::TooLarge)));
        assert!(matches!(read("SSH-2.0-OpenSSH\r\n", 100), Err(Broken::Garbled(_))));
        let huge = chunked.replace("3\r\nabc", "FFFFFFFFFFFFFFFF\r\nabc");
        assert!(matches!(read(&huge, 10), Err(Broken::TooLarge)), "a chunk size that would overflow");
        assert!(matches!(read("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", 100), Err(Broken::Garbled(_))));
        assert!(matches!(read(&chunked.replace("2;x=y\r\nde\r\n0", "9\r\nde"), 100), Err(Broken::Garbled(_))));
        let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(20 << 10));
        assert!(matches!(read(&long, 100), Err(Broken::Garbled(_))), "a header line without end");
        assert!(matches!(read("HTTP/1.1 200 OK\r\nContent-", 100), Err(Broken::Garbled(_))));
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("file:///a b/c.json"), "file%3A%2F%2F%2Fa%20b%2Fc.json");
    }
}

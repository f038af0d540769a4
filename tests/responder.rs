//! A scripted HTTP/1.1 responder: each connection's request is read in full, recorded (its
//! request line and headers), and answered with the next scripted answer — for the requests
//! and answers an emulator does not produce (a real service's error codes, a condition the
//! emulator ignores). One request per connection (`connection: close`).

use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

/// One canned answer: status, extra headers (`{base}` in a value becomes the responder's
/// URL), body.
pub struct Answer(pub u16, pub Vec<(&'static str, String)>, pub String);

/// The requests a responder saw, in order: request line and headers (as sent).
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    pub fn all(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Request `i`'s request line.
    pub fn line(&self, i: usize) -> String {
        self.all()[i].lines().next().unwrap_or_default().to_owned()
    }

    /// The value of header `name` (case-insensitive) in request `i`.
    pub fn header(&self, i: usize, name: &str) -> Option<String> {
        self.all()[i].lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// Read one request (line, headers, and a body by length or chunked) from `r`; the request
/// line and headers are returned.
pub async fn read_request<R: tokio::io::AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> std::io::Result<(String, Vec<u8>)> {
    let mut head = String::new();
    let mut len = 0usize;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
        head.push_str(&line);
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).await?;
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(len, 0);
        r.read_exact(&mut body).await?;
    }
    Ok((head, body))
}

/// A responder answering `script` in order; its URL (`http://127.0.0.1:PORT`) and what it saw.
pub async fn responder(script: Vec<Answer>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Seen::default();
    let log = seen.clone();
    let base = url.clone();
    tokio::spawn(async move {
        for Answer(status, headers, body) in script {
            let (conn, _) = listener.accept().await.unwrap();
            let mut r = BufReader::new(conn);
            let Ok((head, _)) = read_request(&mut r).await else {
                return;
            };
            log.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(head);
            let mut out = format!(
                "HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                out.push_str("content-type: application/json\r\n");
            }
            for (k, v) in headers {
                out.push_str(&format!("{k}: {}\r\n", v.replace("{base}", &base)));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            let mut conn = r.into_inner();
            let _ = conn.write_all(out.as_bytes()).await;
            let _ = conn.shutdown().await;
        }
    });
    (url, seen)
}

//! A forwarding HTTP/1.1 proxy in front of an emulator that can lose answers: a request it was
//! told to lose is forwarded, its answer read in full (so the server applied it), and the
//! client's connection closed without a byte — the "timeout after the write landed" every
//! cloud client meets. One request per client connection; the client is told
//! `Connection: close`, and request bodies sent chunked are forwarded with a length. It also
//! counts: every request it forwards is recorded, so a test can compare what a store says it
//! sent with what reached the emulator.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy; it stops when dropped.
pub struct LossyProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct State {
    /// Answers still to lose, of requests whose method is PUT or POST.
    to_lose: AtomicU32,
    lost: AtomicU32,
    /// The request lines seen, for failure messages.
    seen: Mutex<Vec<String>>,
    /// Each request's line and `X-Amz-Target` (the operation of AWS's JSON protocols).
    requests: Mutex<Vec<(String, Option<String>)>>,
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LossyProxy {
    /// Listen on 127.0.0.1 and forward to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream
            .trim_start_matches("http://")
            .split('/')
            .next()
            .expect("upstream host:port")
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let state = Arc::new(State::default());
        let st = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (st, upstream) = (Arc::clone(&st), upstream.clone());
                tokio::spawn(async move {
                    let _ = serve(conn, &upstream, &st).await;
                });
            }
        });
        Self { url, state, task }
    }

    /// Lose the answers of the next `n` writes (PUT or POST requests).
    pub fn lose_next_writes(&self, n: u32) {
        self.state.to_lose.store(n, Ordering::SeqCst);
    }

    /// How many answers were lost so far.
    pub fn lost(&self) -> u32 {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// Every request forwarded so far: its request line and its `X-Amz-Target` header.
    pub fn requests(&self) -> Vec<(String, Option<String>)> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The request lines forwarded so far.
    pub fn seen(&self) -> Vec<String> {
        self.state
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn serve(conn: TcpStream, upstream: &str, st: &State) -> std::io::Result<()> {
    let mut client = BufReader::new(conn);
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        if client.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        let end = line == b"\r\n";
        head.push(String::from_utf8_lossy(&line).trim_end().to_owned());
        if end {
            break;
        }
    }
    let request_line = head[0].clone();
    let header = |name: &str| {
        head.iter().skip(1).find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(&mut client).await?
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut b = vec![0; len];
        client.read_exact(&mut b).await?;
        b
    };
    st.seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(request_line.clone());
    st.requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((request_line.clone(), header("x-amz-target")));
    let mut out = format!("{request_line}\r\n");
    for h in head.iter().skip(1).filter(|h| !h.is_empty()) {
        let name = h
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !matches!(
            name.as_str(),
            "connection" | "transfer-encoding" | "content-length"
        ) {
            out.push_str(h);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut up = TcpStream::connect(upstream).await?;
    up.write_all(out.as_bytes()).await?;
    up.write_all(&body).await?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer).await?;
    let method = request_line.split(' ').next().unwrap_or("");
    let lose = matches!(method, "PUT" | "POST")
        && st
            .to_lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let mut conn = client.into_inner();
    if lose {
        st.lost.fetch_add(1, Ordering::SeqCst);
        // The server applied the request; the client hears nothing.
        return conn.shutdown().await;
    }
    conn.write_all(&with_close(&answer)).await?;
    conn.shutdown().await
}

/// The answer with `Connection: close` in its head (the client must not reuse the socket).
fn with_close(answer: &[u8]) -> Vec<u8> {
    let Some(eol) = answer.windows(2).position(|w| w == b"\r\n") else {
        return answer.to_vec();
    };
    let mut out = answer[..eol + 2].to_vec();
    out.extend_from_slice(b"Connection: close\r\n");
    out.extend_from_slice(&answer[eol + 2..]);
    out
}

async fn read_chunked(r: &mut BufReader<TcpStream>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).await?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let mut t = String::new();
                if r.read_line(&mut t).await? == 0 || t == "\r\n" {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).await?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf).await?;
    }
}

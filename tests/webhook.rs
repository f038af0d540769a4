//! A webhook receiver on 127.0.0.1 for announcement tests: it records every POST (headers and
//! body) and answers `503` while it is told to fail, `200` otherwise. Blocking, on its own
//! thread, so that the synchronous CLI tests can use it; it stops when dropped.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One request received: its header lines (lowercased names) and its body.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Delivery {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

#[derive(Default)]
struct State {
    received: Mutex<Vec<Delivery>>,
    /// Answer 503 to this many more requests.
    fail_next: AtomicU32,
    failing: AtomicBool,
    stop: AtomicBool,
}

/// A running receiver.
pub struct WebhookReceiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    state: Arc<State>,
    addr: std::net::SocketAddr,
}

impl WebhookReceiver {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the webhook receiver");
        let addr = listener.local_addr().expect("its address");
        let state = Arc::new(State::default());
        let st = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let _ = serve(conn, &st);
            }
        });
        Self {
            url: format!("http://{addr}/hook"),
            state,
            addr,
        }
    }

    /// Answer 503 to the next `n` requests.
    pub fn fail_next(&self, n: u32) {
        self.state.fail_next.store(n, Ordering::SeqCst);
    }

    /// Answer 503 to every request until told otherwise.
    pub fn set_failing(&self, failing: bool) {
        self.state.failing.store(failing, Ordering::SeqCst);
    }

    /// Every request so far, those answered 503 included.
    pub fn received(&self) -> Vec<Delivery> {
        self.state
            .received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

fn serve(conn: std::net::TcpStream, st: &State) -> std::io::Result<()> {
    let mut r = BufReader::new(conn.try_clone()?);
    let mut headers = Vec::new();
    let mut len = 0usize;
    let mut line = String::new();
    r.read_line(&mut line)?;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
            if k == "content-length" {
                len = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    st.received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Delivery { headers, body });
    let fail = st.failing.load(Ordering::SeqCst)
        || st
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let status = if fail {
        "503 Service Unavailable"
    } else {
        "200 OK"
    };
    let mut conn = conn;
    conn.write_all(
        format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes(),
    )?;
    conn.flush()
}

//! Shared by the `colibri serve` tests: start the built binary on a free loopback port, wait for
//! /health, a tiny blocking HTTP/1.1 client over `TcpStream` (Content-Length and chunked
//! bodies), a strict SSE parser, and the server's stderr collected for log checks. Every read has
//! a timeout so a hung server fails the test instead of blocking it.
#![allow(dead_code)] // each test binary uses a different subset

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

pub fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri")
}

pub struct Server {
    pub child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// `colibri serve --port 0 ARGS…`, ready (health 200) or panics after 60 s.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_colibri"))
            .arg("serve")
            .args(["--port", "0", "-t", "1"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn colibri serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(a) = line.strip_prefix("listening on http://") {
                        let _ = tx.send(a.to_string());
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let addr = match rx.recv_timeout(IO_TIMEOUT) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("server did not announce its address; log:\n{}", log.lock().unwrap());
            }
        };
        let s = Server { child, addr, log };
        s.wait_until(|s| s.get("/health").status == 200, "health 200");
        s
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Poll `cond` every 50 ms for up to 30 s.
    pub fn wait_until(&self, mut cond: impl FnMut(&Server) -> bool, what: &str) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if cond(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}; log:\n{}", self.log());
    }

    pub fn get(&self, path: &str) -> Resp {
        request(&self.addr, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        request(&self.addr, "POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
    }

    /// The value of the unlabelled counter or gauge `name` in /metrics.
    pub fn metric(&self, name: &str) -> u64 {
        let text = self.get("/metrics").text();
        let line =
            text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// Wait for the process to exit (up to 60 s); its status code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let t0 = Instant::now();
        while t0.elapsed() < IO_TIMEOUT {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server did not exit");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Write a request (Connection: close) with a Host of `localhost` and, for a POST, a JSON
/// Content-Type, unless `headers` sets them.
pub fn send_request(s: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    if !has("host") {
        head.push_str("Host: localhost\r\n");
    }
    if method == "POST" && !has("content-type") {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before reading everything; ignore a reset while writing.
    let _ = s.write_all(body);
}

/// Status line and headers.
pub fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status =
        line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

/// One chunk of a chunked body; None at the last (zero-size) chunk.
pub fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let size = usize::from_str_radix(line.trim().split(';').next().unwrap(), 16)
        .unwrap_or_else(|_| panic!("chunk size {line:?}"));
    let mut data = vec![0; size];
    r.read_exact(&mut data).unwrap();
    let mut crlf = [0; 2];
    r.read_exact(&mut crlf).unwrap();
    (size > 0).then_some(data)
}

pub fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut s = connect(addr);
    send_request(&mut s, method, path, headers, body);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(&mut r) {
            body.extend(c);
        }
    } else if let Some((_, n)) = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        body.resize(n.parse().unwrap(), 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Resp { status, headers, body }
}

/// Send `bytes` as they are (then, if `shut`, close the writing half) and read the response
/// up to the end of the connection.
pub fn raw(addr: &str, bytes: &[u8], shut: bool) -> Resp {
    let mut s = connect(addr);
    let _ = s.write_all(bytes);
    if shut {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let mut body = Vec::new();
    let _ = r.read_to_end(&mut body);
    Resp { status, headers, body }
}

/// Copy the model at `src` to `dst` with its tokenizer.json metadata changed by `edit`
/// (everything else byte for byte; checksums recomputed by the writer).
pub fn with_tokenizer(src: &Path, dst: &Path, edit: impl Fn(&mut Value)) {
    use colibri::format::{FileWriter, PlannedTensor};
    let model = colibri::Model::open(src, &colibri::LoadOptions::default()).unwrap();
    let p = model.parsed();
    let meta: Vec<_> = p
        .metadata
        .iter()
        .map(|e| {
            let mut bytes = model.meta(&e.key).unwrap().to_vec();
            if e.key == "tokenizer" {
                let mut v: Value = serde_json::from_slice(&bytes).unwrap();
                edit(&mut v);
                bytes = v.to_string().into_bytes();
            }
            (e.key.clone(), e.kind, bytes)
        })
        .collect();
    let plan: Vec<PlannedTensor> = p
        .tensors
        .iter()
        .map(|t| PlannedTensor { name: t.name.clone(), dtype: t.dtype, shape: t.shape.clone(), kind: t.kind })
        .collect();
    let h = &p.header;
    let mut w = FileWriter::create(dst, h.num_layers, h.num_experts, h.top_k, &meta, plan).unwrap();
    for t in &p.tensors {
        let view = model.tensor(&t.name).unwrap();
        w.begin(&t.name).unwrap();
        for e in 0..view.n_experts() {
            w.write(view.expert(e).unwrap_or(view).bytes).unwrap();
        }
        w.end().unwrap();
    }
    w.finish().unwrap();
}

/// Parse a complete `text/event-stream` body strictly as the server writes it: every event is
/// one `data: <payload>` line followed by a blank line; returns the payloads in order.
pub fn parse_sse(body: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let end = rest.find("\n\n").ok_or_else(|| format!("unterminated event: {rest:?}"))?;
        let event = &rest[..end];
        let data = event.strip_prefix("data: ").ok_or_else(|| format!("event without data: {event:?}"))?;
        if data.contains('\n') {
            return Err(format!("multi-line event: {event:?}"));
        }
        out.push(data.to_string());
        rest = &rest[end + 2..];
    }
    Ok(out)
}

/// The JSON chunks of a finished stream; checks it ends with exactly one `[DONE]`.
pub fn sse_chunks(resp: &Resp) -> Vec<Value> {
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    let events = parse_sse(&resp.text()).unwrap();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1);
    events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect()
}

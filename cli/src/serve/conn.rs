//! The HTTP/1 connection layer: accept loop, per-connection limits and graceful drain.
//!
//! `axum::serve` runs hyper without a timer, so a client that trickles its request head (or
//! keeps an idle keep-alive connection) holds a task and a file descriptor forever. Here each
//! connection gets hyper's header-read timeout (`--header-timeout`; it also closes idle
//! keep-alive connections), at
//! most `MAX_CONNECTIONS` are open at once (further ones wait in the kernel's backlog), and on
//! shutdown every connection finishes its in-flight response and closes.

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// hyper's read buffer: it answers 431 to a head that fills it before it is complete (one that
/// arrives whole in a larger read is measured by the guard).
const MAX_HEAD_BYTES: usize = super::guard::MAX_HEAD_BYTES;

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and waits for the
/// open connections to finish their current response.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Closing `stop_tx` tells connections to finish; every connection holds a `done_rx` clone,
    // so `done_tx.closed()` resolves once the last one ends.
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.map_err(std::io::Error::other)?,
            _ = &mut shutdown => break,
        };
        let (stream, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                // Per-connection failures (reset before accept, fd limit): keep serving.
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service =
            TowerToHyperService::new(app.clone().map_request(|req: Request<Incoming>| req.map(axum::body::Body::new)));
        let (mut stop_rx, done_rx) = (stop_rx.clone(), done_rx.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop_rx.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
            drop((permit, done_rx));
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

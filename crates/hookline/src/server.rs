//! The HTTP server: hyper's HTTP/1 with limits a slow or silent client cannot get around.
//!
//! A connection is always in one [`Phase`]: `Idle` (just accepted, or between requests), `Head`
//! (part of a request head has arrived) or `Busy` (a request is being answered). A watchdog per
//! connection closes it when `Idle` outlasts `idle_timeout` or `Head` outlasts
//! `header_read_timeout`; a request body must have arrived `body_read_timeout` after its head
//! (else the answer is 408 and the connection closes). At most `max_connections` are open: one
//! accepted at the cap displaces the connection that has been idle longest, so idle clients
//! cannot lock out a health probe; with none idle, accepting waits for a connection to end.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Request};
use axum::Router;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;

/// The `[http]` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// From the first byte of a request head to its end.
    pub header_read_timeout: Duration,
    /// From the end of a request head to the end of its body.
    pub body_read_timeout: Duration,
    /// A connection with no request under way (just accepted, or kept alive after an answer).
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

/// Why the server closed a connection, as counted in `hookline_http_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    HeaderTimeout,
    BodyTimeout,
    IdleTimeout,
    /// Displaced at the connection cap.
    Evicted,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::HeaderTimeout => "header_timeout",
            Closed::BodyTimeout => "body_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::Evicted => "evicted",
        }
    }
}

/// The error a request body reports when it did not arrive in time; the API answers it 408.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(Duration);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle(Instant),
    Head(Instant),
    Busy,
}

struct Connection {
    phase: Mutex<Phase>,
    /// The watchdog looks at the phase again.
    changed: Notify,
    evict: Notify,
    evicting: AtomicBool,
    body_timed_out: AtomicBool,
}

impl Connection {
    fn phase(&self) -> Phase {
        *self.phase.lock().expect("phase lock")
    }

    fn set(&self, next: Phase) {
        *self.phase.lock().expect("phase lock") = next;
        self.changed.notify_one();
    }

    fn bytes_arrived(&self) {
        let mut phase = self.phase.lock().expect("phase lock");
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
            self.changed.notify_one();
        }
    }

    /// When the watchdog closes it, and why; `None` while a request is answered.
    fn deadline(phase: Phase, limits: &HttpLimits) -> Option<(Instant, Closed)> {
        match phase {
            Phase::Idle(since) => Some((since + limits.idle_timeout, Closed::IdleTimeout)),
            Phase::Head(since) => Some((since + limits.header_read_timeout, Closed::HeaderTimeout)),
            Phase::Busy => None,
        }
    }
}

/// The open connections.
#[derive(Default)]
struct Registry {
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    next: AtomicU64,
    /// A connection ended.
    freed: Notify,
}

impl Registry {
    fn len(&self) -> usize {
        self.open.lock().expect("registry lock").len()
    }

    fn open(self: &Arc<Self>) -> (Arc<Connection>, Slot) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Connection {
            phase: Mutex::new(Phase::Idle(Instant::now())),
            changed: Notify::new(),
            evict: Notify::new(),
            evicting: AtomicBool::new(false),
            body_timed_out: AtomicBool::new(false),
        });
        let open = {
            let mut map = self.open.lock().expect("registry lock");
            map.insert(id, conn.clone());
            map.len()
        };
        crate::telemetry::http_connections(open);
        let slot = Slot {
            registry: self.clone(),
            id,
        };
        (conn, slot)
    }

    /// Asks the connection idle longest to close; false when every one is answering.
    fn evict_idlest(&self) -> bool {
        let map = self.open.lock().expect("registry lock");
        let idlest = map
            .values()
            .filter(|c| !c.evicting.load(Ordering::Relaxed))
            .filter_map(|c| match c.phase() {
                Phase::Idle(since) | Phase::Head(since) => Some((since, c)),
                Phase::Busy => None,
            })
            .min_by_key(|(since, _)| *since);
        match idlest {
            Some((_, c)) => {
                c.evicting.store(true, Ordering::Relaxed);
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A place under the cap, given back when its connection ends however it ends.
struct Slot {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let open = {
            let mut map = self.registry.open.lock().expect("registry lock");
            map.remove(&self.id);
            map.len()
        };
        crate::telemetry::http_connections(open);
        self.registry.freed.notify_one();
    }
}

/// Serves `router` on `listener` until `shutdown` turns true, then lets the requests under way
/// finish and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let registry = Arc::new(Registry::default());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted: wait a
                    // little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        while registry.len() >= limits.max_connections && !registry.evict_idlest() {
            tokio::select! {
                _ = registry.freed.notified() => {}
                _ = shutdown.changed() => break,
            }
        }
        let _ = stream.set_nodelay(true);
        let (conn, slot) = registry.open();
        tokio::spawn(connection(
            stream,
            router.clone(),
            conn,
            limits,
            shutdown.clone(),
            slot,
        ));
    }
    while registry.len() > 0 {
        registry.freed.notified().await;
    }
}

async fn connection(
    stream: TcpStream,
    router: Router,
    conn: Arc<Connection>,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
    _slot: Slot,
) {
    let io = TokioIo::new(Watched {
        stream,
        conn: conn.clone(),
    });
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            answer(router.clone(), conn.clone(), limits, request)
        })
    };
    let serving = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    let mut serving = std::pin::pin!(serving);
    let mut stopping = *shutdown.borrow();
    if stopping {
        serving.as_mut().graceful_shutdown();
    }
    loop {
        let phase = conn.phase();
        // Stopping: a connection with no request under way has nothing to finish.
        if stopping && phase != Phase::Busy {
            return;
        }
        let deadline = Connection::deadline(phase, &limits);
        let expired = async {
            match deadline {
                Some((at, _)) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = serving.as_mut() => return,
            _ = conn.changed.notified() => {}
            _ = conn.evict.notified() => {
                crate::telemetry::http_connection_closed(Closed::Evicted.as_str());
                return;
            }
            _ = expired => {
                if let (Some((_, why)), true) = (deadline, conn.phase() == phase) {
                    crate::telemetry::http_connection_closed(why.as_str());
                    return;
                }
            }
            _ = shutdown.changed(), if !stopping => {
                stopping = true;
                serving.as_mut().graceful_shutdown();
            }
        }
    }
}

/// One request: the body gets its deadline, the answer marks the connection idle once written.
async fn answer(
    mut router: Router,
    conn: Arc<Connection>,
    limits: HttpLimits,
    request: Request<Incoming>,
) -> Result<axum::response::Response, Infallible> {
    conn.set(Phase::Busy);
    let deadline = Box::pin(sleep_until(Instant::now() + limits.body_read_timeout));
    let request = request.map(|body| {
        Body::new(TimedBody {
            body,
            deadline,
            limit: limits.body_read_timeout,
            conn: conn.clone(),
        })
    });
    let mut response = match router.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if conn.body_timed_out.load(Ordering::Relaxed) {
        crate::telemetry::http_connection_closed(Closed::BodyTimeout.as_str());
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response.map(|body| {
        Body::new(Answered {
            body,
            _done: AnswerDone(conn),
        })
    }))
}

/// The socket, telling the connection when bytes arrive.
struct Watched {
    stream: TcpStream,
    conn: Arc<Connection>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.conn.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A request body that fails with [`BodyTimedOut`] once its deadline passes.
struct TimedBody {
    body: Incoming,
    deadline: Pin<Box<Sleep>>,
    limit: Duration,
    conn: Arc<Connection>,
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.conn.body_timed_out.store(true, Ordering::Relaxed);
                    Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit)))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Marks its connection idle when the answer has been handed to the socket (or dropped).
struct AnswerDone(Arc<Connection>);

impl Drop for AnswerDone {
    fn drop(&mut self) {
        self.0.set(Phase::Idle(Instant::now()));
    }
}

struct Answered {
    body: Body,
    _done: AnswerDone,
}

impl http_body::Body for Answered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

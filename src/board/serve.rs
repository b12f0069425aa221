//! `git swarm board --serve`: the live board over HTTP (tiny_http), on 127.0.0.1 unless told otherwise.
//!
//! One thread follows the state ref as `watch` does — file events on a local-path remote ([`RefWatch`]), a fetch
//! every interval on a URL — and reads each new state through the store's patched read of the last one (invariant
//! 32) and the log since the last state ([`Loaded::advance`]), so a new state costs what changed, not the board's
//! size. It renders the page's sections once per state ([`live`]) and hands them to the HTTP threads, which only
//! copy them out: `/` (the page at that state), `/events` (server-sent events, one per new state), `/frame` (the
//! same JSON, for a page that polls), `/note/<id>` (a task and its hand-off note), `/app.js` and `/app.css`.
//!
//! Rules of a local server (`docs/board.md`, *Safety*): GET and HEAD only, and nothing changes anything; a `Host`
//! that is a name other than `localhost` is refused (DNS rebinding: an IP literal cannot be rebound), and so is an
//! `Origin` that is not the page's own; no CORS header is ever sent; a request with a body, a long URL or many
//! headers is refused; at most [`MAX_STREAMS`] event streams and [`MAX_REQUESTS`] other requests at a time; every
//! answer carries a Content-Security-Policy that allows only the page's own script and style files.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use gix::ObjectId;
use serde::Serialize;

use super::live::{self, Budgets, Sections};
use super::{BoardView, Loaded, Options, RefWatch};
use crate::Store;
use crate::ops::Board;
use crate::time::Timestamp;
use crate::{Swarm, TxnError};

/// Event streams open at a time; one more is answered 503 (the page then polls `/frame`).
pub(crate) const MAX_STREAMS: usize = 16;
/// Other requests being answered at a time; one more is answered 503.
pub(crate) const MAX_REQUESTS: usize = 32;
/// The longest request target (path and query) answered.
pub(crate) const MAX_URL: usize = 2_048;
/// Most header lines of a request.
pub(crate) const MAX_HEADERS: usize = 64;
/// Bytes of a hand-off note read (what every reader of `notes/<id>.md` reads).
const NOTE_LIMIT: u64 = 64 * 1024;
/// A comment on an idle event stream this often, so that a closed one is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A new frame at least this often without a change: the landings per minute and expired leases move with the clock.
const REDRAW: Duration = Duration::from_secs(30);

/// The policy of every answer: the page's own script and style files, its own endpoints, and nothing else (no
/// inline script, no other origin); style attributes (the status colours) are allowed.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; \
                       connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("port {port} of {ip} is in use (another program listens there)")]
    PortInUse { ip: IpAddr, port: u16 },
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: SocketAddr, message: String },
    #[error(transparent)]
    Read(#[from] TxnError),
}

/// How the server follows the swarm.
pub(crate) struct Follow<'a> {
    /// How often to fetch a URL remote (and the fallback poll of a local one).
    pub interval: Duration,
    /// Ops of the log read at most.
    pub log_limit: usize,
    pub clock: &'a dyn Fn() -> Timestamp,
    /// The budgets to show for a board (its settings under this clone's).
    pub budgets: &'a dyn Fn(&Board) -> Budgets,
    /// Set by Ctrl-C: the server ends.
    pub stop: &'a AtomicBool,
    /// Told each new state: its commit and how long reading and rendering it took.
    pub on_state: &'a dyn Fn(&State),
    /// What this clone's runners do now ([`crate::runner::status::read_all`]), looked at every second: a new phase
    /// or line of output redraws the page.
    pub local: &'a dyn Fn() -> Vec<crate::runner::status::LocalRun>,
}

/// A state the server shows, and what it cost.
#[derive(Debug, Clone)]
pub(crate) struct State {
    pub commit: String,
    pub tasks: usize,
    /// Reading it: the tip, the patched read of the board, the log since the last state.
    pub read: Duration,
    /// The view and the page's sections.
    pub render: Duration,
}

/// A server listening, not yet serving.
pub(crate) struct Listening {
    http: Arc<tiny_http::Server>,
    addr: SocketAddr,
}

impl Listening {
    /// Listen on `ip`:`port` (port 0: a free one).
    pub(crate) fn bind(ip: IpAddr, port: u16) -> Result<Listening, ServeError> {
        let addr = SocketAddr::new(ip, port);
        let http = tiny_http::Server::http(addr).map_err(|e| match e.downcast_ref::<std::io::Error>() {
            Some(io) if io.kind() == std::io::ErrorKind::AddrInUse => ServeError::PortInUse { ip, port },
            _ => ServeError::Bind { addr, message: e.to_string() },
        })?;
        let addr = http.server_addr().to_ip().unwrap_or(addr);
        Ok(Listening { http: Arc::new(http), addr })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:8377/`.
    pub(crate) fn url(&self) -> String {
        let host = if self.addr.ip().is_unspecified() { "127.0.0.1".to_string() } else { self.addr.ip().to_string() };
        let host = if host.contains(':') { format!("[{host}]") } else { host };
        format!("http://{host}:{}/", self.addr.port())
    }

    /// Serve the board of `swarm`, from `loaded` on, until `follow.stop` is set.
    pub(crate) fn serve(self, swarm: &Swarm, mut loaded: Loaded, follow: &Follow<'_>) -> Result<(), ServeError> {
        let started = Instant::now();
        let mut local = (follow.local)();
        let first = render(0, &loaded, swarm, follow, None, &local);
        (follow.on_state)(&first.state(started.elapsed()));
        let hub = Arc::new(Hub {
            current: Mutex::new(first),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            streams: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
            git_dir: swarm.store().repo.git_dir().to_path_buf(),
        });
        let accept = {
            let (http, hub) = (Arc::clone(&self.http), Arc::clone(&hub));
            std::thread::spawn(move || accept(&http, &hub))
        };
        let watch = RefWatch::new(swarm);
        let mut seq = 0u64;
        let mut error: Option<String> = None;
        let mut last_poll = Instant::now();
        let mut drawn = Instant::now();
        let mut looked = Instant::now();
        while !follow.stop.load(Ordering::Relaxed) {
            let nap = follow
                .interval
                .saturating_sub(last_poll.elapsed())
                .clamp(Duration::from_millis(10), Duration::from_millis(250));
            let event = watch.wait(nap);
            let mut dirty = false;
            let mut read = Duration::ZERO;
            if event || last_poll.elapsed() >= follow.interval {
                last_poll = Instant::now();
                let t0 = Instant::now();
                match swarm.tip() {
                    Ok(Some(tip)) if tip != loaded.snapshot.commit => {
                        let next = swarm
                            .store()
                            .read(tip, true)
                            .map_err(TxnError::from)
                            .and_then(|snap| loaded.advance(swarm, snap, follow.log_limit));
                        match next {
                            Ok(()) => {
                                error = None;
                                dirty = true;
                            }
                            Err(e) => dirty |= failed(&mut error, e.to_string()),
                        }
                    }
                    Ok(Some(_)) => dirty |= error.take().is_some(),
                    Ok(None) => dirty |= failed(&mut error, "the state ref is gone".into()),
                    Err(e) => dirty |= failed(&mut error, e.to_string()),
                }
                read = t0.elapsed();
            }
            if looked.elapsed() >= Duration::from_secs(1) {
                looked = Instant::now();
                let now = (follow.local)();
                if now != local {
                    local = now;
                    dirty = true;
                }
            }
            if dirty || drawn.elapsed() >= REDRAW {
                seq += 1;
                let t0 = Instant::now();
                let next = render(seq, &loaded, swarm, follow, error.clone(), &local);
                let state = next.state(read + t0.elapsed());
                *hub.lock() = next;
                hub.changed.notify_all();
                drawn = Instant::now();
                if dirty {
                    (follow.on_state)(&State { read, render: t0.elapsed(), ..state });
                }
            }
        }
        hub.stopping.store(true, Ordering::SeqCst);
        hub.changed.notify_all();
        self.http.unblock();
        let _ = accept.join();
        Ok(())
    }
}

/// Keep `e` (scrubbed) as the error to show; `true` when it is a new one.
fn failed(error: &mut Option<String>, e: String) -> bool {
    let e = crate::secrets::scrub(&e);
    if error.as_deref() == Some(e.as_str()) {
        return false;
    }
    *error = Some(e);
    true
}

/// The state the HTTP threads serve.
struct Current {
    seq: u64,
    commit: ObjectId,
    view: Arc<BoardView>,
    sections: Arc<Sections>,
    /// [`live::frame`] of it.
    frame: Arc<String>,
    error: Option<String>,
}

impl Current {
    fn state(&self, took: Duration) -> State {
        State { commit: self.view.commit.clone(), tasks: self.view.total, read: Duration::ZERO, render: took }
    }
}

fn render(
    seq: u64,
    loaded: &Loaded,
    swarm: &Swarm,
    follow: &Follow<'_>,
    error: Option<String>,
    local: &[crate::runner::status::LocalRun],
) -> Current {
    let view = loaded.view(swarm, (follow.clock)(), &Options::default(), local);
    let sections = live::sections(&view, &(follow.budgets)(&loaded.snapshot.board));
    let frame = live::frame(seq, &view, &sections, error.as_deref());
    Current {
        seq,
        commit: loaded.snapshot.commit,
        view: Arc::new(view),
        sections: Arc::new(sections),
        frame: Arc::new(frame),
        error,
    }
}

struct Hub {
    current: Mutex<Current>,
    changed: Condvar,
    stopping: AtomicBool,
    streams: AtomicUsize,
    requests: AtomicUsize,
    /// Where the state ref's objects are, for the notes (each request opens the repository: a handle of gix is
    /// not shared between threads in this build).
    git_dir: std::path::PathBuf,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request being answered, counted against its limit until it ends.
struct Slot {
    hub: Arc<Hub>,
    stream: bool,
}

impl Slot {
    fn take(hub: &Arc<Hub>, stream: bool) -> Option<Slot> {
        let (count, max) = if stream { (&hub.streams, MAX_STREAMS) } else { (&hub.requests, MAX_REQUESTS) };
        if count.fetch_add(1, Ordering::SeqCst) >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot { hub: Arc::clone(hub), stream })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let count = if self.stream { &self.hub.streams } else { &self.hub.requests };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept(http: &tiny_http::Server, hub: &Arc<Hub>) {
    for req in http.incoming_requests() {
        if hub.stopping.load(Ordering::SeqCst) {
            let _ = req.respond(answer(503, TEXT, "the server is stopping"));
            break;
        }
        let stream = path_of(req.url()) == "/events";
        match Slot::take(hub, stream) {
            Some(slot) => {
                std::thread::spawn(move || {
                    let hub = Arc::clone(&slot.hub);
                    handle(req, &hub);
                    drop(slot);
                });
            }
            None => {
                let _ = req.respond(answer(503, TEXT, "too many requests at once; try again"));
            }
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json; charset=utf-8";

fn path_of(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// The headers of every answer.
const COMMON: [(&str, &str); 7] = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
    ("Server", "git-swarm"),
];

fn answer(code: u16, ctype: &str, body: impl Into<Vec<u8>>) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let mut r = tiny_http::Response::from_data(body.into()).with_status_code(code);
    for (k, v) in COMMON.iter().copied().chain([("Content-Type", ctype)]) {
        if let Some(h) = header(k, v) {
            r.add_header(h);
        }
    }
    r
}

fn json_error(code: u16, message: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    answer(code, JSON, serde_json::json!({ "error": message }).to_string())
}

/// A request's header, if it has exactly one of that name.
fn one_header<'r>(req: &'r tiny_http::Request, name: &'static str) -> Result<Option<&'r str>, ()> {
    let mut found = req.headers().iter().filter(|h| h.field.equiv(name));
    let first = found.next().map(|h| h.value.as_str());
    if found.next().is_some() { Err(()) } else { Ok(first) }
}

/// Is `host` (a `Host` header: a name or an address, and maybe a port) one this server answers to: `localhost`
/// or an IP literal? Any other name may be an attacker's, resolved to this machine (DNS rebinding).
pub(crate) fn host_allowed(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]:8377`
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(is_port) => {
                return v6.parse::<std::net::Ipv6Addr>().is_ok();
            }
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        },
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Why a request is not answered, if it is not: (status, reason).
fn refused(req: &tiny_http::Request) -> Option<(u16, &'static str)> {
    use tiny_http::Method;
    if !matches!(req.method(), Method::Get | Method::Head) {
        return Some((405, "this server is read-only: GET and HEAD only"));
    }
    if req.url().len() > MAX_URL {
        return Some((414, "the request target is too long"));
    }
    if req.headers().len() > MAX_HEADERS {
        return Some((431, "too many header lines"));
    }
    let has_body =
        req.body_length().is_some_and(|n| n > 0) || req.headers().iter().any(|h| h.field.equiv("Transfer-Encoding"));
    if has_body {
        return Some((413, "a request with a body is refused"));
    }
    let host = match one_header(req, "Host") {
        Ok(Some(h)) if host_allowed(h) => h,
        Ok(Some(_)) => {
            return Some((
                403,
                "this server answers to localhost and IP addresses only (a Host of another name is refused)",
            ));
        }
        _ => return Some((400, "one Host header, please")),
    };
    match one_header(req, "Origin") {
        Ok(None) => None,
        Ok(Some(o)) if o.strip_prefix("http://").is_some_and(|o| o.eq_ignore_ascii_case(host)) => None,
        _ => Some((403, "a request from another origin is refused")),
    }
}

fn handle(req: tiny_http::Request, hub: &Hub) {
    if let Some((code, why)) = refused(&req) {
        let mut r = answer(code, TEXT, why);
        if code == 405
            && let Some(h) = header("Allow", "GET, HEAD")
        {
            r.add_header(h);
        }
        let _ = req.respond(r);
        return;
    }
    let path = path_of(req.url()).to_string();
    let r = match path.as_str() {
        "/" | "/index.html" => {
            let (view, sections, seq, error) = {
                let c = hub.lock();
                (Arc::clone(&c.view), Arc::clone(&c.sections), c.seq, c.error.clone())
            };
            answer(200, "text/html; charset=utf-8", live::page(&view, &sections, seq, error.as_deref()))
        }
        "/app.js" => answer(200, "text/javascript; charset=utf-8", live::SCRIPT),
        "/app.css" => answer(200, "text/css; charset=utf-8", live::STYLE),
        "/frame" => {
            let (frame, seq) = {
                let c = hub.lock();
                (Arc::clone(&c.frame), c.seq)
            };
            let etag = format!("\"{seq}\"");
            if one_header(&req, "If-None-Match") == Ok(Some(etag.as_str())) {
                answer(304, JSON, Vec::new())
            } else {
                let mut r = answer(200, JSON, frame.as_bytes().to_vec());
                if let Some(h) = header("ETag", &etag) {
                    r.add_header(h);
                }
                r
            }
        }
        "/events" => return events(req, hub),
        p => match p.strip_prefix("/note/") {
            Some(id) => note(hub, id),
            None => answer(404, TEXT, "not found"),
        },
    };
    let _ = req.respond(r);
}

/// `/events`: the current state at once, then each new one, as server-sent events (`event: board`, the frame's
/// JSON as data), with a comment every [`KEEP_ALIVE`] so that a closed stream is noticed. The answer is written
/// by hand on the connection, so that each event is flushed as it is written.
fn events(req: tiny_http::Request, hub: &Hub) {
    if *req.method() == tiny_http::Method::Head {
        let _ = req.respond(answer(200, "text/event-stream", Vec::new()));
        return;
    }
    use std::io::Write;
    let mut out = req.into_writer();
    let mut head =
        String::from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nConnection: close\r\n");
    for (k, v) in COMMON {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\nretry: 2000\n\n");
    let mut sent: Option<u64> = None;
    let mut write = |text: &str| -> bool { out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_ok() };
    if !write(&head) {
        return;
    }
    loop {
        let next = {
            let mut c = hub.lock();
            let deadline = Instant::now() + KEEP_ALIVE;
            while Some(c.seq) == sent && !hub.stopping.load(Ordering::SeqCst) && Instant::now() < deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                c = hub.changed.wait_timeout(c, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
            }
            if hub.stopping.load(Ordering::SeqCst) {
                return;
            }
            (Some(c.seq) != sent).then(|| (c.seq, Arc::clone(&c.frame)))
        };
        let ok = match next {
            Some((seq, frame)) => {
                sent = Some(seq);
                write(&format!("event: board\nid: {seq}\ndata: {frame}\n\n"))
            }
            None => write(": keep-alive\n\n"),
        };
        if !ok {
            return;
        }
    }
}

/// What `/note/<id>` answers: the task as the board has it, and its hand-off note.
#[derive(Serialize)]
struct Note<'a> {
    id: &'a str,
    title: &'a str,
    status: crate::model::Status,
    kind: crate::model::Kind,
    holder: Option<&'a str>,
    attempts: u32,
    deps: &'a [String],
    /// `notes/<id>.md` at the state shown (scrubbed of what looks like a secret); `null` when there is none.
    note: Option<String>,
    commit: String,
}

fn note(hub: &Hub, id: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    if crate::model::validate_id(id).is_err() {
        return json_error(400, "not a task id");
    }
    let (view, commit) = {
        let c = hub.lock();
        (Arc::clone(&c.view), c.commit)
    };
    let Ok(i) = view.tasks.binary_search_by(|t| t.id.as_str().cmp(id)) else {
        return json_error(404, "no such task on the board");
    };
    let t = &view.tasks[i];
    let store = match Store::open(&hub.git_dir) {
        Ok(s) => s,
        Err(e) => return json_error(500, &e.to_string()),
    };
    let text = match store.read_text(commit, &crate::state::note_path(id), NOTE_LIMIT) {
        Ok(Some(Ok(text))) => Some(crate::secrets::scrub(&text)),
        Ok(Some(Err(problem))) => Some(format!("(the hand-off note cannot be read: {problem})")),
        Ok(None) => None,
        Err(e) => return json_error(500, &e.to_string()),
    };
    let body = Note {
        id: &t.id,
        title: &t.title,
        status: t.status,
        kind: t.kind,
        holder: t.holder.as_deref(),
        attempts: t.attempts,
        deps: &t.deps,
        note: text,
        commit: commit.to_hex().to_string(),
    };
    answer(200, JSON, serde_json::to_vec(&body).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_localhost_and_ip_literals_are_hosts() {
        for ok in [
            "localhost",
            "localhost:8377",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.1:8377",
            "[::1]:8377",
            "[::1]",
            "10.0.0.5:80",
        ] {
            assert!(host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8377",
            "localhost.evil.example:8377",
            "127.0.0.1.nip.io:8377",
            "",
            ":8377",
            "[::1",
            "[::1]x",
            "127.0.0.1:x",
            "localhost:123456",
            "[evil]:1",
        ] {
            assert!(!host_allowed(bad), "{bad}");
        }
    }
}

//! One HTTP server for the tests that stand in for a web API (GitHub's REST API, a model's chat API): tiny_http on
//! a free loopback port, every request recorded ([`Seen`]), each answered by a route ([`Answer`]). The client under
//! test is never mocked: every request goes through a socket. Requests are served each on a thread of its own
//! (agents send several at once). `model_api.rs` is this server with the model vendors' protocols as its route;
//! `tests/http_backend.rs` keeps a raw socket server of its own, because it must also close a connection without
//! a word, which an HTTP server library does not do.

use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The request target: path and query.
    pub url: String,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("the request body is JSON")
    }
}

/// An answer: status, extra headers (a `Content-Type` among them replaces the JSON default), body.
pub type Answer = (u16, Vec<(&'static str, String)>, String);

/// The server; it stops when dropped.
pub struct Served {
    server: Arc<tiny_http::Server>,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Served {
    /// Serve every request with `route`, on a free loopback port.
    pub fn start(route: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Served {
        Served::start_on("127.0.0.1:0", route)
    }

    /// [`Served::start`] on `addr`.
    pub fn start_on(addr: &str, route: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Served {
        let server = Arc::new(tiny_http::Server::http(addr).expect("bind loopback"));
        let route = Arc::new(route);
        let port = server.server_addr().to_ip().expect("an ip address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (srv, log) = (Arc::clone(&server), Arc::clone(&seen));
        std::thread::spawn(move || {
            for req in srv.incoming_requests() {
                let (route, log) = (Arc::clone(&route), Arc::clone(&log));
                std::thread::spawn(move || answer(req, &*route, &log));
            }
        });
        Served { server, base: format!("http://127.0.0.1:{port}"), port, seen }
    }

    /// The requests so far, in the order they were answered.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

fn answer(mut req: tiny_http::Request, route: &dyn Fn(&Seen) -> Answer, log: &Mutex<Vec<Seen>>) {
    let mut body = String::new();
    let _ = req.as_reader().read_to_string(&mut body);
    let s = Seen {
        method: req.method().to_string(),
        url: req.url().to_string(),
        headers: req
            .headers()
            .iter()
            .map(|h| (h.field.as_str().as_str().to_ascii_lowercase(), h.value.as_str().to_string()))
            .collect(),
        body,
    };
    let (status, extra, text) = route(&s);
    log.lock().expect("lock").push(s);
    let mut resp = tiny_http::Response::from_string(text).with_status_code(status);
    if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        resp.add_header(
            tiny_http::Header::from_bytes("Content-Type", "application/json; charset=utf-8").expect("header"),
        );
    }
    for (k, v) in extra {
        resp.add_header(tiny_http::Header::from_bytes(k, v.as_bytes()).expect("header"));
    }
    let _ = req.respond(resp);
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

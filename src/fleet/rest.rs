//! What a forge's REST client needs before its first request, whichever forge: the base URL checked, a token that
//! may go there (invariant 15: only over https or to a server on this machine, `agent::http::may_carry_secret`),
//! an HTTP client that follows no redirect (the token would go along) and skips proxies for loopback, and the
//! messages' forms of URLs and answers (credentials removed, the token scrubbed, control characters escaped).
//! `github::api` and `gitlab::api` each add their headers, their calls and their sorting of errors.

use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Why no client could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetupError {
    /// The token is empty.
    NoToken,
    /// The base is unusable: its form in messages, and why.
    BadBase { url: String, message: String },
}

/// A base URL, a token and the HTTP client that carries it there.
pub(crate) struct Rest {
    pub(crate) base: String,
    pub(crate) token: String,
    pub(crate) http: reqwest::blocking::Client,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &crate::secrets::redact(&self.base))
            .field("token", &"[redacted]")
            .finish()
    }
}

impl Rest {
    /// A client of the API at `base` with `token`. Refuses an empty token and a base that would carry the token over
    /// plain http to another machine.
    pub(crate) fn new(base: &str, token: &str) -> Result<Rest, SetupError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(SetupError::NoToken);
        }
        let base = base.trim().trim_end_matches('/').to_string();
        let shown = crate::escape::line(&crate::secrets::redact(&base));
        let bad = |message: &str| SetupError::BadBase { url: shown.clone(), message: message.into() };
        let parsed = reqwest::Url::parse(&base).map_err(|_| bad("not a URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad("not an http(s) URL"));
        }
        if !crate::agent::http::may_carry_secret(&base) {
            return Err(bad("refusing to send the token over plain http to another machine (use https)"));
        }
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .user_agent(concat!("git-swarm/", env!("CARGO_PKG_VERSION")))
            // Never resend the token to wherever a redirect points.
            .redirect(reqwest::redirect::Policy::none());
        if crate::agent::http::is_loopback(&base) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| bad(&format!("cannot set up the HTTP client: {e}")))?;
        Ok(Rest { base, token: token.to_string(), http })
    }

    /// A URL of this API as messages show it: credentials in the base removed, control characters escaped.
    pub(crate) fn shown(&self, path: &str) -> String {
        crate::escape::line(&crate::secrets::redact(&format!("{}{path}", self.base)))
    }

    /// What removes the token from text headed for a message (a server may echo it back).
    fn scrub(&self) -> crate::agent::http::Scrub<'_> {
        crate::agent::http::Scrub { key: Some(&self.token) }
    }

    /// `s` fit for a message: one line, the token removed.
    pub(crate) fn quote(&self, s: &str) -> String {
        crate::agent::http::quote(s, &self.scrub())
    }

    /// A request's error with its causes, the token removed.
    pub(crate) fn chain(&self, e: reqwest::Error) -> String {
        crate::agent::http::chain(e, &self.scrub())
    }

    /// The message of an answer whose body is not the API's JSON: its canonical reason when empty, else its start.
    pub(crate) fn plain_message(&self, body: &str, status: u16) -> String {
        if body.trim().is_empty() {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no message")
                .to_string()
        } else {
            self.quote(body.trim())
        }
    }

    /// The message of a redirect, which is never followed.
    pub(crate) fn redirect_message(&self, location: Option<&str>, why: &str) -> String {
        format!(
            "a redirect to {} ({why}), not followed",
            location.map(|l| self.quote(&crate::secrets::redact(l))).unwrap_or_else(|| "?".into())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_never_goes_over_plain_http_to_another_machine() {
        let e = Rest::new("http://gitlab.example.com/api/v4", "glpat-secret").expect_err("plain http elsewhere");
        assert!(matches!(&e, SetupError::BadBase { message, .. } if message.contains("plain http")), "{e:?}");
        assert!(!format!("{e:?}").contains("glpat-secret"));
        assert!(Rest::new("http://127.0.0.1:9/api/v4", "t").is_ok());
        assert!(Rest::new("https://gitlab.com/api/v4/", "t").is_ok_and(|r| r.base == "https://gitlab.com/api/v4"));
        assert_eq!(Rest::new("https://gitlab.com/api/v4", " ").err(), Some(SetupError::NoToken));
        assert!(matches!(Rest::new("ftp://x", "t"), Err(SetupError::BadBase { .. })));
        let r = Rest::new("https://u:pw@gitlab.com/api/v4", "glpat-secret").expect("client");
        assert!(!format!("{r:?}").contains("glpat-secret") && !format!("{r:?}").contains("pw"));
        assert_eq!(r.shown("/x"), "https://gitlab.com/api/v4/x");
        assert_eq!(r.quote("echo glpat-secret\u{1b}"), "echo [redacted]\\u{1b}");
        assert_eq!(r.plain_message("", 404), "Not Found");
        assert_eq!(r.plain_message("<html>\n", 502), "<html>");
        assert_eq!(r.redirect_message(None, "moved"), "a redirect to ? (moved), not followed");
    }
}

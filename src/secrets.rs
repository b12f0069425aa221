//! Secrets kept out of what a runner writes: agent logs, the state ref (and so the HTML board), its own messages.
//!
//! A [`Scrubber`] replaces with `[redacted]`:
//! * **by name**: the value of every environment variable of this process whose name says it is a secret
//!   (`KEY`, `TOKEN`, `SECRET`, `PASS`, `PWD` — `MYSQL_PWD`, not the working directory's `PWD` —, `CREDENTIAL`,
//!   `AUTH`, `COOKIE`, `SESSION`, `PRIVATE`, `WEBHOOK`, `DSN`, `SIGNATURE`);
//! * **by value**: every environment value that carries a credential whatever its name — a URL with a password
//!   (`postgres://u:p@h`), a URL with a token in its path or query (a Slack or Discord webhook, `?token=`), a
//!   well-known token shape (`sk-…`, `ghp_…`, `AKIA…`);
//! * **by shape**, in any text: credentials in URLs, token-like path segments and secret query values of URLs,
//!   and the well-known token prefixes.
//!
//! Best effort by nature — a secret that looks like prose and hides under an innocent name is not found — and
//! documented as such in `docs/security.md`.

use std::sync::OnceLock;

const REDACTED: &str = "[redacted]";

/// Words in a variable's name that make its value a secret.
const SECRET_NAMES: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "PWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "WEBHOOK",
    "DSN",
    "SIGNATURE",
];

/// Variables whose names match [`SECRET_NAMES`] but hold no secret (paths, toggles of common tools).
const NOT_SECRETS: &[&str] = &["PWD", "OLDPWD", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KEYTIMEOUT", "XAUTHORITY"];

/// Prefixes of well-known token formats.
const TOKEN_PREFIXES: &[&str] =
    &["sk-", "ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_", "AKIA", "xoxb-", "xoxp-", "xoxa-", "glpat-", "hf_"];

/// Query parameters whose value is a secret.
const SECRET_QUERY: &[&str] =
    &["token", "key", "api_key", "apikey", "secret", "sig", "signature", "password", "pass", "access_token", "auth"];

/// The shortest value replaced (shorter ones — `1`, `true`, `main` — would redact ordinary words).
const MIN_SECRET: usize = 8;

/// The secrets of an environment, longest first (so that a secret containing another is replaced whole).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scrubber {
    values: Vec<String>,
}

impl Scrubber {
    /// The secrets of `vars` (name, value): by name and by value, as the module says.
    pub(crate) fn from_vars<I, K, V>(vars: I) -> Scrubber
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut values: Vec<String> = Vec::new();
        for (k, v) in vars {
            let (k, v) = (k.as_ref().to_ascii_uppercase(), v.as_ref());
            if v.len() < MIN_SECRET || v.trim().is_empty() {
                continue;
            }
            // `AUTH` is in `GIT_AUTHOR_NAME` too: a name and an email are no secret.
            let named =
                !NOT_SECRETS.contains(&k.as_str()) && SECRET_NAMES.iter().any(|w| k.replace("AUTHOR", "").contains(w));
            if named || shape(v) != v {
                values.push(v.to_string());
            }
        }
        values.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        values.dedup();
        Scrubber { values }
    }

    /// This process's environment, read once.
    pub fn process() -> &'static Scrubber {
        static SCRUBBER: OnceLock<Scrubber> = OnceLock::new();
        SCRUBBER.get_or_init(|| {
            Scrubber::from_vars(
                std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
            )
        })
    }

    /// `text` with every secret of this scrubber and every secret shape replaced.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        shape(&out)
    }
}

/// Open (creating, appending or truncating) a file that may hold what an agent printed: readable by its owner
/// alone (0600, also when an older version created it more open).
pub fn private_file(path: &std::path::Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut o = std::fs::OpenOptions::new();
    o.create(true).mode(0o600);
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(true);
    }
    let f = o.open(path)?;
    if f.metadata()?.permissions().mode() & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// A writer of an agent's output to its log that scrubs every line ([`Scrubber::scrub`]) before it reaches the
/// file. Output is held until its line ends (at most [`LogScrubber::MAX_LINE`] bytes: a longer line is scrubbed
/// and written in pieces), so that a secret split across two reads is still found.
pub(crate) struct LogScrubber {
    pending: Vec<u8>,
}

impl LogScrubber {
    pub(crate) const MAX_LINE: usize = 64 * 1024;

    pub fn new() -> LogScrubber {
        LogScrubber { pending: Vec::new() }
    }

    /// Take `chunk`; return what can be written now, scrubbed.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let cut = match self.pending.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if self.pending.len() >= Self::MAX_LINE => self.pending.len(),
            None => return Vec::new(),
        };
        let ready: Vec<u8> = self.pending.drain(..cut).collect();
        scrub(&String::from_utf8_lossy(&ready)).into_bytes()
    }

    /// What is left at the end of the output, scrubbed.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.pending);
        if rest.is_empty() { rest } else { scrub(&String::from_utf8_lossy(&rest)).into_bytes() }
    }
}

impl Default for LogScrubber {
    fn default() -> Self {
        Self::new()
    }
}

/// [`Scrubber::scrub`] with this process's environment.
pub fn scrub(text: &str) -> String {
    Scrubber::process().scrub(text)
}

/// `text` with the secrets that show by their shape replaced: URL credentials, token-like URL path segments and
/// secret query values, and the well-known token prefixes.
pub fn shape(text: &str) -> String {
    token_prefixes(&urls(text))
}

/// `scheme://user:password@host/path?query` with the password (all the user info), token-like path segments and
/// secret query values replaced, wherever it appears in `text`.
fn urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The URL ends at whitespace or a quote; the authority at the first '/', '?' or '#'.
        let end =
            tail.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')).unwrap_or(tail.len());
        let url = &tail[..end];
        let auth_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let (authority, after) = url.split_at(auth_end);
        match authority.rfind('@') {
            Some(at) if at > 0 => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        out.push_str(&path_and_query(after));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn path_and_query(s: &str) -> String {
    let (path, query) = match s.find('?') {
        Some(q) => (&s[..q], Some(&s[q + 1..])),
        None => (s, None),
    };
    let mut out: String =
        path.split('/').map(|seg| if token_like(seg) { REDACTED } else { seg }).collect::<Vec<_>>().join("/");
    if let Some(q) = query {
        out.push('?');
        let (q, frag) = match q.find('#') {
            Some(h) => (&q[..h], Some(&q[h..])),
            None => (q, None),
        };
        let pairs: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, v))
                    if !v.is_empty() && (SECRET_QUERY.contains(&k.to_ascii_lowercase().as_str()) || token_like(v)) =>
                {
                    format!("{k}={REDACTED}")
                }
                _ => p.to_string(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
        if let Some(f) = frag {
            out.push_str(f);
        }
    }
    out
}

/// A URL path segment or value that looks like a token: 20+ characters of letters, digits, `-` and `_`, with
/// letters and digits mixed, not hexadecimal alone (a commit id or a digest is no secret), and not a word joined
/// by dashes (`a-long-branch-name-2024`).
fn token_like(s: &str) -> bool {
    s.len() >= 20
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes().any(|b| b.is_ascii_alphabetic())
        && !s.bytes().all(|b| b.is_ascii_hexdigit())
        && s.split(['-', '_']).any(|run| run.len() >= 16)
}

fn token_prefixes(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut res = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let word_start =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b'-');
        let hit = if word_start { TOKEN_PREFIXES.iter().find(|p| text[i..].starts_with(**p)) } else { None };
        if let Some(p) = hit {
            let rest = &text[i + p.len()..];
            let n = rest.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-').count();
            if n >= 16 {
                res.push_str(REDACTED);
                i += p.len() + n;
                continue;
            }
        }
        let ch = text[i..].chars().next().unwrap_or(' ');
        res.push(ch);
        i += ch.len_utf8();
    }
    res
}

/// A URL fit for messages and logs: credentials (`https://user:token@host/…`, `https://token@host/…`) removed. An
/// ssh URL keeps its user (`ssh://git@host/…`: the account, not a secret; a password after it goes).
pub fn redact(url: &str) -> String {
    let Some(i) = url.find("://") else { return url.to_string() };
    let rest = &url[i + 3..];
    let host_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..host_end].rfind('@') else { return url.to_string() };
    let scheme = &url[..i];
    if scheme.eq_ignore_ascii_case("ssh") || scheme.eq_ignore_ascii_case("git+ssh") {
        let user = rest[..at].split(':').next().unwrap_or_default();
        return format!("{scheme}://{user}@{}", &rest[at + 1..]);
    }
    format!("{scheme}://{}", &rest[at + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(
            shape("fatal: https://bob:hunter22@example.com/r.git and postgres://u:p4ssw0rd@db:5432/x ok"),
            "fatal: https://[redacted]@example.com/r.git and postgres://[redacted]@db:5432/x ok"
        );
        assert_eq!(shape("see https://example.com/a@b and git@host:x"), "see https://example.com/a@b and git@host:x");
    }

    #[test]
    fn webhooks_and_secret_queries_are_redacted_and_ordinary_urls_kept() {
        let slack = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX1";
        assert_eq!(shape(slack), "https://hooks.slack.com/services/T00000000/B00000000/[redacted]");
        let discord = "https://discord.com/api/webhooks/123456789012345678/aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-abc";
        assert_eq!(shape(discord), "https://discord.com/api/webhooks/123456789012345678/[redacted]");
        assert_eq!(shape("http://h/x?token=abc&page=2#top"), "http://h/x?token=[redacted]&page=2#top");
        for ok in [
            "https://github.com/org/repo/commit/4f7aa24e0c1d2b3a4f7aa24e0c1d2b3a4f7aa24e",
            "https://example.com/docs/a-long-branch-name-for-2024/index.html?page=2",
            "https://crates.io/crates/serde_json/1.0.140",
        ] {
            assert_eq!(shape(ok), ok);
        }
    }

    #[test]
    fn well_known_tokens_are_redacted() {
        let t = shape(
            "auth failed for sk-ant-api03-abcdefghijklmnop1234 and ghp_ABCDEFGHIJKLMNOPQRSTUVWX; task-sk-short ok",
        );
        assert!(!t.contains("abcdefghijklmnop") && !t.contains("ABCDEFGHIJKLMNOP"), "{t}");
        assert!(t.contains("task-sk-short ok"), "{t}");
        assert_eq!(shape("naïve text, no secrets"), "naïve text, no secrets");
    }

    #[test]
    fn environment_values_are_secrets_by_name_and_by_value() {
        let s = Scrubber::from_vars([
            ("MYSQL_PWD", "hunter2hunter2"),
            ("DB_PASS", "correct-horse"),
            ("ALERTS", "https://hooks.slack.com/services/T1/B2/abcdefghij0123456789xyz"),
            ("DATABASE_URL", "postgres://u:s3cretpass@db/x"),
            ("PWD", "/home/me/project"),
            ("HOME", "/home/me"),
            ("GIT_SWARM_AGENT", "worker-1234567"),
            ("SHORT_KEY", "abc"),
            ("GIT_AUTHOR_NAME", "Ada Lovelace"),
        ]);
        let text = "pw hunter2hunter2, pass correct-horse, url https://hooks.slack.com/services/T1/B2/abcdefghij0123456789xyz, \
                    in /home/me/project as worker-1234567 with abc";
        let out = s.scrub(text);
        for secret in ["hunter2hunter2", "correct-horse", "abcdefghij0123456789xyz"] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        let out = s.scrub(&format!("{out} by Ada Lovelace"));
        for kept in ["/home/me/project", "worker-1234567", "with abc", "Ada Lovelace"] {
            assert!(out.contains(kept), "{kept} lost in {out}");
        }
        assert_eq!(s.values.len(), 4, "{s:?}");
    }
}

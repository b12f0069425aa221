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
//!   and the well-known token prefixes; a placeholder (`${TOKEN}`, `{token}`, `%s`) where a password or a query
//!   value would be is none. [`shapes_in`] says where and of what kind, for the scan of a landing (`leaks`).
//!
//! Best effort by nature — a secret that looks like prose and hides under an innocent name is not found — and
//! documented as such in `docs/security.md`.

use std::borrow::Cow;
use std::ops::Range;

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

/// Prefixes of well-known token formats, each with how a finding names it (never with the token).
const TOKEN_PREFIXES: &[(&str, &str)] = &[
    ("sk-", "a token shaped like sk-…"),
    ("ghp_", "a token shaped like ghp_…"),
    ("gho_", "a token shaped like gho_…"),
    ("ghs_", "a token shaped like ghs_…"),
    ("ghu_", "a token shaped like ghu_…"),
    ("ghr_", "a token shaped like ghr_…"),
    ("github_pat_", "a token shaped like github_pat_…"),
    ("AKIA", "a key shaped like AKIA…"),
    ("xoxb-", "a token shaped like xoxb-…"),
    ("xoxp-", "a token shaped like xoxp-…"),
    ("xoxa-", "a token shaped like xoxa-…"),
    ("glpat-", "a token shaped like glpat-…"),
    ("hf_", "a token shaped like hf_…"),
];

/// The kinds of secret found in URLs ([`shapes_in`]).
const URL_PASSWORD: &str = "a password in a URL";
const URL_USER_TOKEN: &str = "a token as the user of a URL";
const URL_PATH_TOKEN: &str = "a token in the path of a URL";
const URL_QUERY_SECRET: &str = "a secret in the query of a URL";
/// The user of a URL without a password (`ssh://git@host/…`): redacted in what is written (it may be a token), but
/// an account, not a credential, for [`is_secret`] and for the scan of a landing.
pub const URL_USER: &str = "the user of a URL";

/// Query parameters whose value is a secret.
const SECRET_QUERY: &[&str] =
    &["token", "key", "api_key", "apikey", "secret", "sig", "signature", "password", "pass", "access_token", "auth"];

/// The shortest value replaced (shorter ones — `1`, `true`, `main` — would redact ordinary words).
const MIN_SECRET: usize = 8;

/// The secrets of an environment, longest first (so that a secret containing another is replaced whole).
#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    values: Vec<String>,
}

impl Scrubber {
    /// The secrets of `vars` (name, value): by name and by value, as the module says.
    pub fn from_vars<I, K, V>(vars: I) -> Scrubber
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut values: Vec<String> = vars
            .into_iter()
            .filter(|(k, v)| is_secret(k.as_ref(), v.as_ref()))
            .map(|(_, v)| v.as_ref().to_string())
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        values.dedup();
        Scrubber { values }
    }

    /// This process's secrets, as the binary installed them ([`crate::install`]).
    pub fn process() -> &'static Scrubber {
        &crate::process().secrets
    }

    /// Where the secret values are in `text`, overlapping ones too.
    fn occurrences(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        for v in &self.values {
            let step = v.chars().next().map_or(1, char::len_utf8);
            let mut from = 0;
            while let Some(i) = text[from..].find(v.as_str()) {
                out.push(from + i..from + i + v.len());
                from += i + step;
            }
        }
        out
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

/// Is `value`, the value of the environment variable `name`, a secret? By name or by value, as the module says; a
/// value shorter than `MIN_SECRET` never is. One rule for what is scrubbed ([`Scrubber::from_vars`]) and what the
/// scan of a landing looks for (`leaks::known_from_vars`), so that the two cannot disagree.
pub fn is_secret(name: &str, value: &str) -> bool {
    if value.len() < MIN_SECRET || value.trim().is_empty() {
        return false;
    }
    let name = name.to_ascii_uppercase();
    // `AUTH` is in `GIT_AUTHOR_NAME` too: a name and an email are no secret.
    let named =
        !NOT_SECRETS.contains(&name.as_str()) && SECRET_NAMES.iter().any(|w| name.replace("AUTHOR", "").contains(w));
    named || shapes_in(value).iter().any(|(_, kind)| *kind != URL_USER)
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
/// file. Output is held until its line ends, so that a secret split across two reads is still found. A line longer
/// than `LogScrubber::MAX_LINE` is written in pieces, each cut where no secret can straddle the cut: a tail at
/// least as long as the longest secret value is held back, and the cut moves before any value, token or URL that
/// would fall across it (see `LogScrubber::flush_long`). Memory stays bounded.
pub struct LogScrubber {
    scrubber: Cow<'static, Scrubber>,
    /// What is held, as text: a byte that is not UTF-8 becomes U+FFFD as it arrives (as `from_utf8_lossy` would),
    /// so that cuts and the ranges of secrets are in the same offsets.
    pending: String,
    /// The first bytes of a character that the last chunk cut short (at most 3).
    partial: Vec<u8>,
}

/// How long a secret found by its shape is held to be at the most, in what a long line keeps back: an API token is
/// tens of bytes, a URL with a password rarely a few hundred.
const SHAPE_HOLD: usize = 1024;

impl LogScrubber {
    pub(crate) const MAX_LINE: usize = 64 * 1024;

    /// Scrubbing with this process's environment.
    pub fn new() -> LogScrubber {
        LogScrubber { scrubber: Cow::Borrowed(Scrubber::process()), pending: String::new(), partial: Vec::new() }
    }

    /// Scrubbing with `scrubber` (a test's secrets).
    #[cfg(test)]
    pub(crate) fn with(scrubber: Scrubber) -> LogScrubber {
        LogScrubber { scrubber: Cow::Owned(scrubber), pending: String::new(), partial: Vec::new() }
    }

    /// Take `chunk`; return what can be written now, scrubbed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        // Only the new text can end a line: what was held has none (1-byte reads stay linear).
        let before = self.pending.len();
        self.decode(chunk);
        let mut out = String::new();
        if let Some(i) = self.pending[before..].rfind('\n') {
            let end = before + i + 1;
            out = self.scrubber.scrub(&self.pending[..end]);
            self.pending.drain(..end);
        }
        let hold = self.hold();
        if self.pending.len() >= Self::MAX_LINE.max(4 * hold) {
            out.push_str(&self.flush_long(hold));
        }
        out.into_bytes()
    }

    /// What is left at the end of the output, scrubbed.
    pub fn finish(&mut self) -> Vec<u8> {
        if !std::mem::take(&mut self.partial).is_empty() {
            self.pending.push(char::REPLACEMENT_CHARACTER);
        }
        let rest = std::mem::take(&mut self.pending);
        if rest.is_empty() { Vec::new() } else { self.scrubber.scrub(&rest).into_bytes() }
    }

    /// Append `chunk` to the text held, keeping a character it cuts short for the next chunk.
    fn decode(&mut self, chunk: &[u8]) {
        let mut bytes = std::mem::take(&mut self.partial);
        bytes.extend_from_slice(chunk);
        let mut pieces = bytes.utf8_chunks().peekable();
        while let Some(piece) = pieces.next() {
            self.pending.push_str(piece.valid());
            let bad = piece.invalid();
            if bad.is_empty() {
                continue;
            }
            let cut_short = pieces.peek().is_none() && std::str::from_utf8(bad).is_err_and(|e| e.error_len().is_none());
            if cut_short {
                self.partial = bad.to_vec();
            } else {
                self.pending.push(char::REPLACEMENT_CHARACTER);
            }
        }
    }

    /// What a long line keeps back: no secret value and no shape is longer, so none that is not whole in the
    /// buffer yet can start before the cut.
    fn hold(&self) -> usize {
        self.scrubber.values.first().map_or(0, String::len).max(SHAPE_HOLD)
    }

    /// Write the long line held but for its last `hold` bytes or more: the cut moves back to the start of any
    /// secret value, token or URL that it would fall inside, so that each piece is scrubbed whole. Should that take
    /// it back past half the buffer (a token or a URL of tens of KiB, which is no secret but is scrubbed as one),
    /// what lies from that start to the cut is written as one `[redacted]`, and past the end of any secret value
    /// that straddles the cut, so that the buffer always shrinks by half.
    fn flush_long(&mut self, hold: usize) -> String {
        let text = &self.pending;
        let mut cut = text.len().saturating_sub(hold);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let values = self.scrubber.occurrences(text);
        let mut spans = find_shapes(text).whole;
        spans.extend(values.iter().cloned());
        let safe = back_out(cut, spans);
        let keep = if safe >= text.len() / 2 {
            safe
        } else {
            values.iter().filter(|v| v.start < cut && cut < v.end).map(|v| v.end).max().unwrap_or(cut)
        };
        let mut out = self.scrubber.scrub(&text[..safe]);
        if keep > safe {
            out.push_str(REDACTED);
        }
        self.pending.drain(..keep);
        out
    }
}

/// `cut` moved back to the start of every span it falls inside (one pass suffices: taken by descending start, a
/// span once passed starts after where the cut went).
fn back_out(mut cut: usize, mut spans: Vec<Range<usize>>) -> usize {
    spans.sort_by_key(|s| std::cmp::Reverse(s.start));
    for s in spans {
        if s.start < cut && cut < s.end {
            cut = s.start;
        }
    }
    cut
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
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, _) in shapes_in(text) {
        out.push_str(&text[at..range.start]);
        out.push_str(REDACTED);
        at = range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Where `text` holds a secret by its shape, and its kind (`a token shaped like ghp_…`, [`URL_USER`], …: never the
/// secret): byte ranges in order, overlapping ones joined (the kind is the first's). What [`shape`] replaces.
pub fn shapes_in(text: &str) -> Vec<(Range<usize>, &'static str)> {
    let mut found = find_shapes(text).found;
    found.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    let mut out: Vec<(Range<usize>, &'static str)> = Vec::with_capacity(found.len());
    for (range, kind) in found {
        match out.last_mut() {
            Some((last, _)) if range.start < last.end => last.end = last.end.max(range.end),
            _ => out.push((range, kind)),
        }
    }
    out
}

/// What [`find_shapes`] sees in a text.
#[derive(Default)]
struct Shapes {
    /// The secrets, with their kinds, in no particular order, perhaps overlapping.
    found: Vec<(Range<usize>, &'static str)>,
    /// The spans that text cut inside would hide a secret in from a later look at the piece after the cut (it no
    /// longer has the `://` of its URL, or the prefix of its token): every URL from its `://` to its end, and every
    /// token.
    whole: Vec<Range<usize>>,
}

/// The one implementation of the shapes, for [`shape`], [`shapes_in`] and [`LogScrubber`].
fn find_shapes(text: &str) -> Shapes {
    let mut shapes = Shapes::default();
    urls(text, &mut shapes);
    token_prefixes(text, &mut shapes);
    shapes
}

/// In `scheme://user:password@host/path?query` wherever it appears in `text`: the user info, token-like path
/// segments and secret query values.
fn urls(text: &str, shapes: &mut Shapes) {
    let mut from = 0;
    while let Some(i) = text[from..].find("://") {
        let start = from + i + 3;
        let tail = &text[start..];
        // The URL ends at whitespace or a quote; the authority at the first '/', '?' or '#'.
        let end =
            tail.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')).unwrap_or(tail.len());
        let url = &tail[..end];
        let auth_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        if let Some(at) = url[..auth_end].rfind('@').filter(|at| *at > 0) {
            let info = &url[..at];
            let kind = match info.split_once(':') {
                Some((_, password)) if placeholder(password) => None,
                Some(_) => Some(URL_PASSWORD),
                None if token_like(info) => Some(URL_USER_TOKEN),
                None => Some(URL_USER),
            };
            if let Some(kind) = kind {
                shapes.found.push((start..start + at, kind));
            }
        }
        path_and_query(&url[auth_end..], start + auth_end, shapes);
        shapes.whole.push(from + i..start + end);
        from = start + end;
    }
}

/// The secrets in the path and query `s` of a URL, which starts at byte `offset` of the text.
fn path_and_query(s: &str, offset: usize, shapes: &mut Shapes) {
    let (path, query) = match s.find('?') {
        Some(q) => (&s[..q], Some(q + 1)),
        None => (s, None),
    };
    let mut at = offset;
    for seg in path.split('/') {
        if token_like(seg) {
            shapes.found.push((at..at + seg.len(), URL_PATH_TOKEN));
        }
        at += seg.len() + 1;
    }
    let Some(q) = query else { return };
    let query = &s[q..];
    let query = &query[..query.find('#').unwrap_or(query.len())];
    let mut at = offset + q;
    for pair in query.split('&') {
        if let Some((k, v)) = pair.split_once('=')
            && !v.is_empty()
            && !placeholder(v)
            && (SECRET_QUERY.contains(&k.to_ascii_lowercase().as_str()) || token_like(v))
        {
            let v_at = at + k.len() + 1;
            shapes.found.push((v_at..v_at + v.len(), URL_QUERY_SECRET));
        }
        at += pair.len() + 1;
    }
}

/// A value in code that stands for a secret, not one: `${TOKEN}`, `$TOKEN`, `{token}`, `%s`, `%(token)s` — what a
/// landing adds in a format string or a shell script (`https://x-access-token:${TOKEN}@github.com`).
fn placeholder(v: &str) -> bool {
    v.starts_with('{')
        || v.starts_with("${")
        || v.starts_with("%(")
        || v == "%s"
        || v.strip_prefix('$').is_some_and(|name| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
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

/// The tokens with a well-known prefix: the prefix at the start of a word, then 16 or more letters, digits, `-` or
/// `_`.
fn token_prefixes(text: &str, shapes: &mut Shapes) {
    let bytes = text.as_bytes();
    let in_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    let mut i = 0;
    while i < bytes.len() {
        let word_start = i == 0 || !in_word(bytes[i - 1]);
        let hit =
            if word_start { TOKEN_PREFIXES.iter().find(|(p, _)| bytes[i..].starts_with(p.as_bytes())) } else { None };
        if let Some((prefix, kind)) = hit {
            let n = bytes[i + prefix.len()..].iter().take_while(|b| in_word(**b)).count();
            if n >= 16 {
                let token = i..i + prefix.len() + n;
                i = token.end;
                shapes.whole.push(token.clone());
                shapes.found.push((token, kind));
                continue;
            }
        }
        // Prefixes are ASCII: a byte inside a character starts none, and every range ends on a character boundary.
        i += 1;
    }
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

    #[test]
    fn shapes_are_found_with_their_place_and_a_kind_that_does_not_hold_them() {
        let text = "x ghp_ABCDEFGHIJ0123456789 y postgres://u:s3cretpass@db/x ssh://git@github.com/o/r";
        let found = shapes_in(text);
        let shown: Vec<(&str, &str)> = found.iter().map(|(r, k)| (&text[r.clone()], *k)).collect();
        assert_eq!(
            shown,
            [
                ("ghp_ABCDEFGHIJ0123456789", "a token shaped like ghp_…"),
                ("u:s3cretpass", URL_PASSWORD),
                ("git", URL_USER)
            ]
        );
        // A token that is also a URL's user is one range, not two.
        assert_eq!(shapes_in("https://ghp_ABCDEFGHIJ0123456789@github.com/o/r").len(), 1);
    }

    #[test]
    fn placeholders_are_no_secrets_and_an_account_is_no_credential() {
        for text in [
            "https://x-access-token:${TOKEN}@github.com/o/r",
            "https://user:$DB_PASSWORD@db/x",
            "https://api.example.com/v1?api_key={key}&page=2",
            "https://api.example.com/v1?token=%s",
        ] {
            assert_eq!(shape(text), text);
        }
        assert_eq!(shape("https://u:$ecret99@db/x"), "https://[redacted]@db/x");
        assert!(!is_secret("ORIGIN", "ssh://git@github.com/o/r.git"));
        assert!(is_secret("ORIGIN", "https://u:s3cretpass@github.com/o/r.git"));
        assert!(is_secret("MY_API_KEY", "abcdefgh") && !is_secret("MY_API_KEY", "abcdefg"));
    }

    /// Exactly `n` bytes of ordinary text, with characters of two and three bytes.
    fn filler(n: usize) -> String {
        let mut out = String::with_capacity(n);
        for c in "lorem ipsum dolor, naïve café 日本 sit amet. ".chars().cycle() {
            if out.len() + c.len_utf8() > n {
                break;
            }
            out.push(c);
        }
        while out.len() < n {
            out.push('.');
        }
        out
    }

    fn through(scrubber: &mut LogScrubber, input: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            out.extend(scrubber.feed(piece));
            assert!(scrubber.pending.len() <= 2 * LogScrubber::MAX_LINE, "{} bytes held", scrubber.pending.len());
        }
        out.extend(scrubber.finish());
        out
    }

    #[test]
    fn a_secret_across_the_cut_of_a_long_line_is_still_redacted() {
        let secret = "Zq9-very-secret-value-77";
        let scrubber = Scrubber::from_vars([("API_KEY", secret)]);
        let cluster = format!("{secret} ghp_ABCDEFGHIJ0123456789 https://bob:hunter22@example.com/x ");
        for chunk in [1, 7, 1000, 4096, 4097, 65536] {
            // Where the first full buffer ends (where a flush of all of it would cut), and the cut about
            // `SHAPE_HOLD` bytes before it.
            let full = LogScrubber::MAX_LINE.div_ceil(chunk) * chunk;
            // Every place for one size of read, every few for the others (a debug build is slow).
            let step = if chunk == 4096 { 1 } else { 5 };
            let around = |at: usize| (at - cluster.len() - 8..at + 8).step_by(step);
            for at in around(full - SHAPE_HOLD).chain(around(full)) {
                let line = format!("{}{cluster}{}\nafter\n", filler(at), filler(2_000));
                let out = through(&mut LogScrubber::with(scrubber.clone()), line.as_bytes(), chunk);
                let out = String::from_utf8(out).expect("UTF-8 in, UTF-8 out");
                for leak in [secret, "ghp_ABCD", "hunter22"] {
                    assert!(!out.contains(leak), "{leak} written, chunks of {chunk}, the cluster at {at}");
                }
                assert!(out.contains(REDACTED));
                assert_eq!(out, scrubber.scrub(&line), "chunks of {chunk}, the cluster at {at}");
            }
        }
    }

    #[test]
    fn a_long_line_is_written_as_it_is_and_memory_stays_bounded() {
        let line = format!("{}\n", filler(300_000));
        for chunk in [1, 4095, 65536, 300_001] {
            let out = through(&mut LogScrubber::with(Scrubber::default()), line.as_bytes(), chunk);
            assert_eq!(out, line.as_bytes(), "chunks of {chunk}");
        }
        // A "token" of a MiB cannot be held back whole: what is seen of it goes as `[redacted]`.
        let token = format!("ghp_{}", "a1".repeat(512 * 1024));
        let out = through(&mut LogScrubber::with(Scrubber::default()), token.as_bytes(), 4096);
        assert!(out.starts_with(REDACTED.as_bytes()), "{:?}", String::from_utf8_lossy(&out[..40]));
        // Bytes that are not UTF-8 become U+FFFD, whatever the chunks cut.
        let out = through(&mut LogScrubber::with(Scrubber::default()), b"a\xc3\xa9b\xffc", 1);
        assert_eq!(String::from_utf8(out).expect("text"), "a\u{e9}b\u{fffd}c");
    }
}

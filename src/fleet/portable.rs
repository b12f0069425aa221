//! Shared settings that only work on the machine that wrote them: a pinned `exec`, `check` or endpoint that names
//! a path in a temporary folder, a home directory or this clone's own absolute path, or a server on loopback. A
//! workflow pins the digest of those settings (`GIT_SWARM_TRUST`), so every runner would run them, and fail: no
//! runner has `/tmp/xyz/agent.sh`. Pure; not GitHub's alone.

use std::path::Path;

/// One setting that names something of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalName {
    /// The setting, as the trust document names it (`roles.worker.exec`, `run.check`).
    pub key: String,
    /// The path or URL in it.
    pub found: String,
}

/// Folders no runner has the author's files in: temporary folders and home directories (Linux, macOS).
const MACHINE_DIRS: &[&str] = &["/tmp", "/var/tmp", "/private", "/home", "/root", "/Users", "/Volumes"];

/// Hosts that are this machine.
const LOOPBACK: &[&str] = &["localhost", "127.", "[::1]", "0.0.0.0"];

/// The settings among `lines` (a trust document's `key = <TOML value>`) that name a path under a temporary folder,
/// a home directory, `clone` (this clone's work tree) or `home`, or a URL on loopback. `prompts/…` lines name blobs
/// of the state ref, which every runner reads: never local.
pub(crate) fn local_names(lines: &[String], clone: Option<&Path>, home: Option<&Path>) -> Vec<LocalName> {
    let mut roots: Vec<String> = MACHINE_DIRS.iter().map(|d| d.to_string()).collect();
    for p in [clone, home].into_iter().flatten() {
        roots.push(p.to_string_lossy().trim_end_matches('/').to_string());
        if let Ok(real) = std::fs::canonicalize(p) {
            roots.push(real.to_string_lossy().trim_end_matches('/').to_string());
        }
    }
    roots.retain(|r| !r.is_empty());
    let mut out = Vec::new();
    for line in lines {
        let Some((key, value)) = line.split_once(" = ") else { continue };
        let mut texts = Vec::new();
        strings(&parse_value(value), &mut texts);
        for text in texts {
            for word in words(&text) {
                let local = roots.iter().any(|r| word == r || word.starts_with(&format!("{r}/"))) || loopback_url(word);
                if local && !out.iter().any(|l: &LocalName| l.key == key && l.found == word) {
                    out.push(LocalName { key: key.to_string(), found: word.to_string() });
                }
            }
        }
    }
    out
}

/// A TOML value as the trust document writes it, parsed back (a string is unquoted and unescaped).
fn parse_value(value: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

fn strings(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::String(s) => out.push(s.clone()),
        toml::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        toml::Value::Table(t) => t.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The words of a command line, split where a shell or an option would split a path: white space, quotes,
/// `=`, and the shell's operators.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "'\"`=;|&()<>,".contains(c)).filter(|w| !w.is_empty())
}

fn loopback_url(word: &str) -> bool {
    let Some(rest) = word.strip_prefix("http://").or_else(|| word.strip_prefix("https://")) else { return false };
    let host = rest.split('/').next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or_default();
    LOOPBACK.iter().any(|l| {
        host.starts_with(l) && (l.ends_with('.') || host[l.len()..].is_empty() || host[l.len()..].starts_with(':'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(lines: &[&str], clone: Option<&str>) -> Vec<(String, String)> {
        let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        local_names(&lines, clone.map(Path::new), Some(Path::new("/srv/me")))
            .into_iter()
            .map(|l| (l.key, l.found))
            .collect()
    }

    #[test]
    fn paths_of_this_machine_are_found() {
        let got = names(
            &[
                "roles.worker.exec = \"sh '/tmp/xyz/agent.sh' --fast\"",
                "run.check = \"cd /work/proj && make CONFIG=/home/me/c.mk\"",
                "roles.judge.exec = \"python3 /Users/me/judge.py\"",
                "roles.planner.base_url = \"http://127.0.0.1:8080/v1\"",
                "roles.x.exec = \"/srv/me/bin/agent\"",
                "prompts/worker.md = blob 0123456789abcdef0123456789abcdef01234567",
            ],
            Some("/work/proj"),
        );
        assert_eq!(
            got,
            [
                ("roles.worker.exec".to_string(), "/tmp/xyz/agent.sh".to_string()),
                ("run.check".into(), "/work/proj".into()),
                ("run.check".into(), "/home/me/c.mk".into()),
                ("roles.judge.exec".into(), "/Users/me/judge.py".into()),
                ("roles.planner.base_url".into(), "http://127.0.0.1:8080/v1".into()),
                ("roles.x.exec".into(), "/srv/me/bin/agent".into()),
            ]
        );
    }

    #[test]
    fn what_every_runner_has_is_not_local() {
        let got = names(
            &[
                "roles.worker.exec = \"sh agents/run.sh\"",
                "roles.worker.preset = \"claude\"",
                "run.check = \"cargo test --quiet && /usr/bin/env python3 -m pytest -q tests/\"",
                "roles.planner.base_url = \"https://api.example.com/v1\"",
                "roles.judge.base_url = \"http://localhost.example.com/v1\"",
                "target = \"main\"",
                "roles.w.exec = \"ls /tmpfiles /homework\"",
            ],
            Some("/work/proj"),
        );
        assert_eq!(got, Vec::<(String, String)>::new());
        assert!(loopback_url("http://localhost:11434/v1") && loopback_url("https://[::1]/x"));
    }
}

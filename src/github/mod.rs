//! git swarm on GitHub Actions: the workflow that runs a fleet of runner jobs ([`workflow`]) and the REST client that
//! starts it and lists its runs ([`api`]).
//!
//! What is not GitHub's alone lives in [`crate::fleet`] (shared with `crate::gitlab`): how a fresh runner installs
//! git-swarm and the agents' CLIs ([`install`]), the pinned settings that only work on the author's machine
//! ([`portable`]), the push budget ([`budget`]) and the runner commands. They are re-exported here under their old
//! paths.
//!
//! No terminal I/O here; the CLI (`src/cli/ci.rs`, `dispatch.rs`, `runs.rs`) prints.

pub(crate) mod api;
pub(crate) mod workflow;

pub(crate) use crate::fleet::{budget, install, portable};

/// The file name of the generated workflow (under `.github/workflows/`), which `dispatch` and `runs` address.
pub(crate) const WORKFLOW_FILE: &str = "git-swarm.yml";

/// A GitHub repository: `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RepoSlug {
    pub owner: String,
    pub name: String,
}

impl std::fmt::Display for RepoSlug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// GitHub's rule for owner and repository names: ASCII letters, digits, `-`, `_`, `.`; not `.` or `..`.
fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl std::str::FromStr for RepoSlug {
    type Err = String;

    /// `owner/name`, exactly (what `--repo` takes).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{}' is not a GitHub repository: use owner/name", crate::escape::line(s));
        let (owner, name) = s.split_once('/').ok_or_else(bad)?;
        if !valid_part(owner) || !valid_part(name) {
            return Err(bad());
        }
        Ok(RepoSlug { owner: owner.to_string(), name: name.to_string() })
    }
}

impl RepoSlug {
    /// The repository a remote URL on github.com names: `https://github.com/o/r(.git)`, `git@github.com:o/r.git`,
    /// `ssh://git@github.com(:22)/o/r`; `None` for any other URL (another host, a path).
    pub(crate) fn from_remote_url(url: &str) -> Option<RepoSlug> {
        let url = url.trim();
        let path = if let Some(rest) = url.strip_prefix("git@github.com:") {
            rest
        } else {
            let (scheme, rest) = url.split_once("://")?;
            if !matches!(scheme, "https" | "http" | "ssh" | "git") {
                return None;
            }
            let (authority, path) = rest.split_once('/')?;
            // userinfo (a token in an https URL, git@ for ssh) and port are not part of the host.
            let host = authority.rsplit('@').next()?;
            let host = host.split(':').next()?;
            if !host.eq_ignore_ascii_case("github.com") && !host.eq_ignore_ascii_case("www.github.com") {
                return None;
            }
            path
        };
        let path = path.trim_end_matches('/');
        let path = path.strip_suffix(".git").unwrap_or(path);
        let slug: RepoSlug = path.parse().ok()?;
        Some(slug)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_from_remote_urls() {
        let want = Some(RepoSlug { owner: "o".into(), name: "r".into() });
        for url in [
            "https://github.com/o/r",
            "https://github.com/o/r.git",
            "https://github.com/o/r/",
            "https://x-access-token:abc@github.com/o/r.git",
            "git@github.com:o/r.git",
            "git@github.com:o/r",
            "ssh://git@github.com/o/r",
            "ssh://git@github.com:22/o/r.git",
        ] {
            assert_eq!(RepoSlug::from_remote_url(url), want, "{url}");
        }
        for url in [
            "https://gitlab.com/o/r.git",
            "/srv/git/r.git",
            "file:///srv/o/r",
            "https://github.com/o",
            "https://github.com/o/r/extra",
            "git@github.com:../r.git",
            "https://github.com.evil.example/o/r",
        ] {
            assert_eq!(RepoSlug::from_remote_url(url), None, "{url}");
        }
        assert_eq!("a-b/c.d_e".parse::<RepoSlug>().map(|s| s.to_string()), Ok("a-b/c.d_e".to_string()));
        for bad in ["o", "o/", "/r", "o/r/x", "o/r;rm", "../r", "o/.."] {
            assert!(bad.parse::<RepoSlug>().is_err(), "{bad}");
        }
    }
}

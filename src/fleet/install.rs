//! How a fleet's runners get `git-swarm` and the agents' CLIs: the shell commands a CI job runs on a fresh
//! machine. Pure (no I/O), and not GitHub's alone: another CI generator installs the same way.
//!
//! By default a runner builds git-swarm from its git repository at the exact commit of the binary that wrote the
//! workflow (`build.rs` records it), so the fleet runs what the author ran; `--from-crates-io` once the crate is
//! published there; any command of the user's (`--install`) otherwise.

use std::fmt::Write as _;

/// What this binary knows of its own source (recorded by `build.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Build {
    /// `CARGO_PKG_VERSION`.
    pub version: String,
    /// The commit of the source tree it was built from (40 hex digits), if known.
    pub commit: Option<String>,
    /// Tracked files differed from that commit at build time.
    pub dirty: bool,
    /// Built from a package (`cargo install git-swarm` from crates.io), not from a git work tree.
    pub packaged: bool,
    /// The package's `repository` (Cargo.toml): where its source is.
    pub repository: String,
}

impl Build {
    /// This binary's.
    pub(crate) fn this() -> Build {
        let commit = option_env!("GIT_SWARM_COMMIT").filter(|c| is_commit(c)).map(str::to_string);
        Build {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit,
            dirty: option_env!("GIT_SWARM_COMMIT_DIRTY") == Some("1"),
            packaged: option_env!("GIT_SWARM_PACKAGED") == Some("1"),
            repository: env!("CARGO_PKG_REPOSITORY").to_string(),
        }
    }
}

/// 40 hex digits.
pub(crate) fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Where the runners install git-swarm from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Built from a git repository at one commit: `cargo install --locked --git <url> --rev <rev> git-swarm`.
    Git { url: String, rev: String },
    /// From crates.io, this version: `cargo install --locked git-swarm --version <version>`.
    CratesIo { version: String },
    /// A shell command of the user's (`--install`).
    Command(String),
}

impl Source {
    /// The default of a binary: its own commit from its repository; a packaged build (crates.io) installs its
    /// version from crates.io; `None` when neither is known (a build from a tarball).
    pub(crate) fn default_for(build: &Build) -> Option<Source> {
        match &build.commit {
            Some(rev) if !build.packaged => Some(Source::Git { url: build.repository.clone(), rev: rev.clone() }),
            _ if build.packaged => Some(Source::CratesIo { version: build.version.clone() }),
            _ => None,
        }
    }

    /// The shell command a runner runs on a cache miss.
    pub(crate) fn command(&self) -> String {
        match self {
            Source::Git { url, rev } => {
                format!("cargo install --locked --git {} --rev {rev} git-swarm", sh_word(url))
            }
            Source::CratesIo { version } => format!("cargo install --locked git-swarm --version {version}"),
            Source::Command(cmd) => cmd.clone(),
        }
    }

    /// What tells one install from another in a cache key: the commit (its first 12 digits), the version, or a
    /// hash of the command; and a hash of the whole command, so that another URL is another entry too.
    pub(crate) fn cache_id(&self) -> String {
        let what = match self {
            Source::Git { rev, .. } => rev.get(..12).unwrap_or(rev).to_string(),
            Source::CratesIo { version } => version.clone(),
            Source::Command(_) => "cmd".to_string(),
        };
        format!("{what}-{}", fnv1a(&self.command()))
    }

    /// Check what goes into the command.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self {
            Source::Git { url, rev } => {
                validate_git_url(url)?;
                if !is_commit(rev) {
                    return Err(format!("'{}' is not a commit: give its 40 hex digits", crate::escape::line(rev)));
                }
                Ok(())
            }
            Source::CratesIo { version } => check_version(version),
            Source::Command(cmd) => check_command(cmd),
        }
    }
}

/// A version as cargo takes it: letters, digits, `.`, `-`, `+`.
pub(crate) fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() || !version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')) {
        return Err(format!("'{}' is not a version", crate::escape::line(version)));
    }
    Ok(())
}

/// A shell command for a `run:` block: not empty, no control characters but newlines and tabs.
pub(crate) fn check_command(cmd: &str) -> Result<(), String> {
    if cmd.trim().is_empty() {
        return Err("the command is empty".into());
    }
    if cmd.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err("the command contains control characters".into());
    }
    Ok(())
}

/// A URL `cargo install --git` takes, fit to be written into a workflow file: no white space or control characters,
/// and no password (a token in an `https://user:token@…` URL would be published with the file).
pub(crate) fn validate_git_url(url: &str) -> Result<(), String> {
    let shown = crate::escape::line(url);
    if url.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("'{shown}' is not a git URL"));
    }
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && userinfo.contains(':')
        {
            return Err(format!(
                "'{}' carries a password: the workflow file would publish it (runners read a public repository \
                 without one)",
                crate::escape::line(&crate::secrets::redact(url))
            ));
        }
    } else if !url.contains(':') {
        return Err(format!("'{shown}' is not a URL: use https://…, ssh://… or file://…"));
    }
    Ok(())
}

/// `text` as one word of a POSIX shell: as it is when it needs no quotes, else in `'…'`.
pub(crate) fn sh_word(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c)) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Is this a URL of this machine only (a path, `file://`), which a hosted runner cannot reach?
pub(crate) fn is_local_url(url: &str) -> bool {
    url.starts_with("file://") || url.starts_with('/')
}

/// A stable 64-bit FNV-1a hash, as 16 hex digits (cache keys).
pub(crate) fn fnv1a(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// How one preset's CLI is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registry {
    /// `npm install -g <package>@<version>`.
    Npm,
    /// `pipx install <package>==<version>` (Ubuntu's Python refuses a system-wide `pip install`).
    Pipx,
}

/// The package of each preset whose CLI is on a registry (`src/agent/preset.rs` names them in its hints; the test
/// `every_tested_preset_has_its_package` keeps the two in step).
const PACKAGES: &[(&str, Registry, &str)] = &[
    ("claude", Registry::Npm, "@anthropic-ai/claude-code"),
    ("codex", Registry::Npm, "@openai/codex"),
    ("gemini", Registry::Npm, "@google/gemini-cli"),
    ("opencode", Registry::Npm, "opencode-ai"),
    ("aider", Registry::Pipx, "aider-chat"),
];

/// The command that installs the CLI of `preset` at the release git-swarm is tested with (`Preset::tested`,
/// which `.ci/agents.sh` installs too), so that the fleet runs the flags that release has.
pub(crate) fn agent_cli(preset: &str) -> Result<String, String> {
    let p = crate::agent::preset::find(preset).ok_or_else(|| {
        format!("'{}' is not a preset (one of: {})", crate::escape::line(preset), crate::agent::preset::names())
    })?;
    let Some((_, registry, package)) = PACKAGES.iter().find(|(name, _, _)| *name == p.name) else {
        return Err(format!(
            "the {} CLI is on no package registry, so no version can be pinned: install it with --setup ({})",
            p.name, p.install
        ));
    };
    let mut cmd = String::new();
    let _ = match registry {
        Registry::Npm => write!(cmd, "npm install -g --no-audit --no-fund {package}@{}", p.tested),
        Registry::Pipx => write!(cmd, "pipx install {package}=={}", p.tested),
    };
    Ok(cmd)
}

/// The presets the shared settings name (`roles.<role>.preset = "…"` lines of a trust document), each once, in
/// order.
pub(crate) fn presets_named(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in lines {
        let Some((key, value)) = line.split_once(" = ") else { continue };
        if key.starts_with("roles.") && key.ends_with(".preset") {
            let name = value.trim().trim_matches('"').to_string();
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REV: &str = "3d3c42e5aac5ba805825da76410c181273ba90b1";

    #[test]
    fn the_install_commands_and_their_cache_ids() {
        let git = Source::Git { url: "https://github.com/o/git-swarm".into(), rev: REV.into() };
        assert_eq!(
            git.command(),
            format!("cargo install --locked --git https://github.com/o/git-swarm --rev {REV} git-swarm")
        );
        assert!(git.cache_id().starts_with("3d3c42e5aac5-"), "{}", git.cache_id());
        let other = Source::Git { url: "https://github.com/fork/git-swarm".into(), rev: REV.into() };
        assert_ne!(git.cache_id(), other.cache_id(), "another URL, another cache entry");
        let crates = Source::CratesIo { version: "0.1.0".into() };
        assert_eq!(crates.command(), "cargo install --locked git-swarm --version 0.1.0");
        assert!(crates.cache_id().starts_with("0.1.0-"));
        assert_eq!(Source::Command("make install".into()).command(), "make install");
        let odd = Source::Git { url: "file:///a b".into(), rev: REV.into() };
        assert!(odd.validate().is_err(), "white space in a URL");
    }

    #[test]
    fn the_default_follows_what_the_binary_knows() {
        let mut b = Build {
            version: "0.1.0".into(),
            commit: Some(REV.into()),
            dirty: false,
            packaged: false,
            repository: "https://github.com/git-swarm/git-swarm".into(),
        };
        assert_eq!(
            Source::default_for(&b),
            Some(Source::Git { url: "https://github.com/git-swarm/git-swarm".into(), rev: REV.into() })
        );
        b.packaged = true;
        assert_eq!(Source::default_for(&b), Some(Source::CratesIo { version: "0.1.0".into() }));
        b.packaged = false;
        b.commit = None;
        assert_eq!(Source::default_for(&b), None);
    }

    #[test]
    fn urls_and_revs_are_checked() {
        for ok in ["https://github.com/o/r", "ssh://git@github.com/o/r.git", "git@github.com:o/r.git", "file:///srv/r"]
        {
            assert_eq!(validate_git_url(ok), Ok(()), "{ok}");
        }
        for bad in ["", "https://x/ y", "/srv/r", "https://user:ghp_secret@github.com/o/r", "a\u{1b}b:c"] {
            let e = validate_git_url(bad).expect_err(bad);
            assert!(!e.contains("ghp_secret"), "the password is not repeated: {e}");
        }
        for bad in ["main", "v0.1.0", &REV[..39], "g".repeat(40).as_str()] {
            assert!(Source::Git { url: "https://h/r".into(), rev: bad.into() }.validate().is_err(), "{bad}");
        }
        assert!(is_local_url("file:///srv/r") && is_local_url("/srv/r") && !is_local_url("https://h/r"));
    }

    #[test]
    fn every_tested_preset_has_its_package() {
        for p in crate::agent::preset::PRESETS {
            match agent_cli(p.name) {
                Ok(cmd) => {
                    assert!(!p.untested, "{}", p.name);
                    let (_, _, package) = PACKAGES.iter().find(|(n, _, _)| *n == p.name).expect("package");
                    assert!(p.install.contains(package), "{}: the preset's hint names {package}", p.name);
                    assert!(cmd.contains(p.tested) && !p.tested.is_empty(), "{}: {cmd}", p.name);
                }
                Err(e) => assert!(p.untested && e.contains("--setup"), "{}: {e}", p.name),
            }
        }
        assert_eq!(
            agent_cli("claude").as_deref(),
            Ok(format!(
                "npm install -g --no-audit --no-fund @anthropic-ai/claude-code@{}",
                crate::agent::preset::find("claude").map(|p| p.tested).unwrap_or_default()
            )
            .as_str())
        );
        assert!(agent_cli("aider").is_ok_and(|c| c.starts_with("pipx install aider-chat==")));
        assert!(agent_cli("nosuch").is_err_and(|e| e.contains("claude")));
        let lines = [
            "roles.default.preset = \"claude\"".to_string(),
            "roles.judge.preset = \"codex\"".to_string(),
            "roles.worker.preset = \"claude\"".to_string(),
            "run.check = \"make\"".to_string(),
        ];
        assert_eq!(presets_named(&lines), ["claude", "codex"]);
    }
}

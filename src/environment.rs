//! The process environment, read once. [`Environment`] is a snapshot of every variable, taken when `git swarm`
//! starts (`cli::main`: the one read of the binary's environment; the engine reads none either, it is handed the
//! variables it takes through `git_swarm_core::Process`). Whatever needs a variable gets this snapshot, or the
//! value, as a parameter or a field.
//!
//! Each variable read by its name is declared once, in `variables!` below: what it sets and the rule for its value.
//! The table of `docs/configuration.md` (*The environment*) and the manual's ENVIRONMENT section are made from that
//! declaration (test-checked). A knob of ours (`GIT_SWARM_*`) with a value that cannot be used is a [`BadVar`]
//! naming it: every command stops on it before it starts (exit 2), except the hooks' handlers, which say so and take
//! the default (a hook never fails a commit or an agent over a broken environment). Set to nothing (empty, or only
//! blanks), a knob is unset. The system's variables (`HOME`, `XDG_*`, `PATH`, `USER`, …) keep their own
//! conventions: a `HOME` or an `XDG_*` folder that is not an absolute path is no folder (as the XDG base directory
//! specification says of its variables).
//!
//! The variables the settings name (an `http` agent's `apiKeyEnv`, `[roles.*] env`, `[forge] token_env`) are read by
//! [`Environment::text`]; the allow-list of a contained agent and the known-secrets scan take the whole list
//! ([`Environment::vars_os`], [`Environment::utf8_vars`]). Child processes the runner starts without containment
//! (git, a setup command) inherit the process's environment as the system gave it: git's own configuration
//! (`GIT_*`, `SSH_AUTH_SOCK`, `HOME`) is git's to read, never a setting of ours.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Declares every variable read by its name, once: its name, what it sets (the doc comment) and the rule for its
/// value. The docs' table and the manual's list are made from it.
macro_rules! variables {
    ($( $(#[doc = $doc:literal])+ $var:ident = $name:literal, $rule:literal; )+) => {
        /// A variable the binary reads (or hands to the engine) by its name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum Var {
            $( $(#[doc = $doc])+ $var, )+
        }

        impl Var {
            /// Every one, in the order of the docs' table.
            pub(crate) const ALL: &'static [Var] = &[$(Var::$var),+];

            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $(Var::$var => $name,)+
                }
            }

            /// What a value must be, and what unset means.
            pub(crate) const fn rule(self) -> &'static str {
                match self {
                    $(Var::$var => $rule,)+
                }
            }

            /// What it sets (its doc comment, on one line).
            pub(crate) fn meaning(self) -> String {
                let text = match self {
                    $(Var::$var => concat!($($doc, " "),+),)+
                };
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            }
        }
    };
}

variables! {
    /// The shared remote, as `--remote` (a remote's name, a URL or a path); over `git config swarm.remote`.
    Remote = "GIT_SWARM_REMOTE", "text, not starting with `-`";
    /// Which swarm (`refs/swarm/<name>`), as `--swarm`; over `git config swarm.name`.
    Swarm = "GIT_SWARM_SWARM", "a swarm name (letters, digits, `-`, `_`, `.`)";
    /// This agent's id, as `--agent`; over `git config swarm.agent`. A runner sets it for its agent.
    Agent = "GIT_SWARM_AGENT",
        "an agent id, checked as `--agent`'s; empty or not UTF-8 counts as unset (a git hook must not stop on it)";
    /// The plan task that `git swarm add` files under, as `add --parent` (a runner sets it for a planner's agent).
    Parent = "GIT_SWARM_PARENT", "a task id";
    /// How the state ref is reached, over `git config swarm.transport`.
    Transport = "GIT_SWARM_TRANSPORT", "`auto`, `git` or `git-fetch`";
    /// Seconds added to the clock of every op (tests skew it; an `up` fleet's members inherit it).
    ClockOffset = "GIT_SWARM_CLOCK_OFFSET", "a whole number of seconds, negative too; unset: 0";
    /// How long an op retries lost races and an unreachable remote.
    MaxRetrySecs = "GIT_SWARM_MAX_RETRY_SECS", "a whole number of seconds; unset: 300";
    /// How long one git push or fetch against the remote may take (the engine's limit).
    GitTimeout = "GIT_SWARM_GIT_TIMEOUT", "a number of seconds above 0; unset: 600";
    /// Digests of shared settings this clone's runners may run, besides `git config swarm.trusted` (how a workflow
    /// file pins its own).
    Trust = "GIT_SWARM_TRUST",
        "digests as `git swarm trust --digest` prints them (64 hex digits) or `any` (everything), comma-separated";
    /// A file each command appends one JSON line to: where its ops spent their time (docs/performance.md).
    Profile = "GIT_SWARM_PROFILE", "a path";
    /// The bubblewrap program agents are contained with (a test names none, to see a runner without a sandbox).
    Bwrap = "GIT_SWARM_BWRAP", "a path; unset: `bwrap` on `PATH`";
    /// The first back-off of an `http` agent's request that is tried again (doubled at each retry).
    HttpRetryBaseMs = "GIT_SWARM_HTTP_RETRY_BASE_MS", "a whole number of milliseconds; unset: 1000";
    /// How long the `pre-push` hook's read of the board may take before it pushes without its claim check.
    HookTimeout = "GIT_SWARM_HOOK_TIMEOUT", "a whole number of seconds; unset: 10";
    /// How often an agent hook looks at the board to renew its lease, at most (per clone).
    HookRenewSecs = "GIT_SWARM_HOOK_RENEW_SECS", "a whole number of seconds; unset: 60";
    /// The task of an agent's run (set by the runner): the `commit-msg` hook's `Swarm-Task` trailer, the agent
    /// hooks' renewals.
    TaskId = "GIT_SWARM_TASK_ID", "a task id";
    /// The epoch of the run's claim (set by the runner), for the agent hooks' renewals.
    Epoch = "GIT_SWARM_EPOCH", "a whole number";
    /// Where an agent hook writes the agent's last message as its hand-off (set by the runner).
    HandoffFile = "GIT_SWARM_HANDOFF_FILE", "a path";
    /// Inside an agent's run (set by the runner): where its `git swarm add` puts the tasks the runner files after
    /// the run.
    Outbox = "GIT_SWARM_OUTBOX", "a path";
    /// The home: work trees under `~/.cache`, completions, the login files a run gets a copy of.
    Home = "HOME", "an absolute path; else there is none";
    /// Where runners keep their work trees and run files (`git-swarm/worktrees/` under it).
    XdgCacheHome = "XDG_CACHE_HOME", "an absolute path; else `~/.cache`";
    /// Where git's user excludes file and fish's completions are.
    XdgConfigHome = "XDG_CONFIG_HOME", "an absolute path; else `~/.config`";
    /// Where bash's completions go.
    XdgDataHome = "XDG_DATA_HOME", "an absolute path; else `~/.local/share`";
    /// Where bash's completions go, before `XDG_DATA_HOME`.
    BashCompletionUserDir = "BASH_COMPLETION_USER_DIR", "an absolute path; else under `XDG_DATA_HOME`";
    /// Where agent CLIs, the check's programs and bubblewrap are found; its folders are shown to a contained agent.
    Path = "PATH", "folders, as the shell's";
    /// The user part of the default agent id.
    User = "USER", "text; unset: `USERNAME`, else `agent`";
    /// The user part of the default agent id, without `USER`.
    Username = "USERNAME", "text";
    /// The host part of the default agent id, when the kernel does not say it.
    Hostname = "HOSTNAME", "text; unset: `COMPUTERNAME`, else `host`";
    /// The host part of the default agent id, without `HOSTNAME`.
    Computername = "COMPUTERNAME", "text";
    /// Declares a disposable sandbox to Claude Code (which then skips its permission checks as root).
    IsSandbox = "IS_SANDBOX", "`1`: declared; anything else: not";
    /// `git -c` as git hands it to a subcommand, which `git swarm` applies when it opens the repository.
    GitConfigParameters = "GIT_CONFIG_PARAMETERS", "git's; what cannot be read of it is left out";
    /// `git -c` of newer gits: the engine numbers its own entries after these.
    GitConfigCount = "GIT_CONFIG_COUNT", "a whole number (git's)";
    /// The author of the commits of a runner and its agents (else `user.name`, else the agent id).
    GitAuthorName = "GIT_AUTHOR_NAME", "git's";
    /// The author's email (else `user.email`, else `<agent>@git-swarm.invalid`).
    GitAuthorEmail = "GIT_AUTHOR_EMAIL", "git's";
    /// The committer of the agents' commits (else as the author).
    GitCommitterName = "GIT_COMMITTER_NAME", "git's";
    /// The committer's email (else as the author's).
    GitCommitterEmail = "GIT_COMMITTER_EMAIL", "git's";
    /// The GitHub API of `dispatch`, `runs` and a `[forge]` on GitHub (GitHub Enterprise), under `[forge] api_url`.
    GithubApiUrl = "GITHUB_API_URL", "a URL; unset: `https://api.github.com`";
    /// The GitLab API, under `[forge] api_url`, over the API of the remote's server.
    GitlabApiUrl = "GITLAB_API_URL", "a URL; unset: the remote's server's, else `https://gitlab.com/api/v4`";
    /// GitHub's token: `dispatch`, `runs`, a runner's pull request (`[forge] token_env` names another).
    GithubToken = "GITHUB_TOKEN", "a token; unset: `GH_TOKEN`";
    /// GitHub's token, without `GITHUB_TOKEN` (`gh auth token`).
    GhToken = "GH_TOKEN", "a token";
    /// GitLab's token: `dispatch --gitlab`, `runs --gitlab`, a runner's merge request.
    GitlabToken = "GITLAB_TOKEN", "a token";
}

/// A value of a knob that cannot be used: the variable, its value as given, why and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}={value}: {why}", var.name())]
pub(crate) struct BadVar {
    pub(crate) var: Var,
    /// The value, escaped for a terminal.
    pub(crate) value: String,
    pub(crate) why: String,
}

impl BadVar {
    fn new(var: Var, value: &OsStr, why: impl Into<String>) -> BadVar {
        BadVar { var, value: crate::escape::line(&value.to_string_lossy()), why: why.into() }
    }

    /// What to do about it: the variable's rule.
    pub(crate) fn fix(&self) -> String {
        format!("unset {}, or give it what it takes: {}", self.var.name(), self.var.rule())
    }
}

/// The knobs, parsed once; `None`: unset (or a bad value, reported beside).
#[derive(Debug, Clone, Default)]
struct Knobs {
    remote: Option<String>,
    swarm: Option<String>,
    agent: Option<String>,
    parent: Option<String>,
    transport: Option<crate::Transport>,
    clock_offset: Option<i64>,
    max_retry: Option<Duration>,
    trust: Vec<String>,
    profile: Option<PathBuf>,
    bwrap: Option<PathBuf>,
    http_retry_base_ms: Option<u64>,
    hook_timeout: Option<Duration>,
    hook_renew: Option<Duration>,
    task_id: Option<String>,
    epoch: Option<u64>,
    handoff_file: Option<PathBuf>,
    outbox: Option<PathBuf>,
}

/// The process environment as it was when the command started ([the module](self)).
#[derive(Debug, Clone)]
#[cfg_attr(test, derive(Default))]
pub(crate) struct Environment {
    /// Every variable, in the order the process got them.
    vars: Vec<(OsString, OsString)>,
    knobs: Knobs,
}

/// A whole number of seconds as a duration.
fn seconds(v: &str) -> Result<Duration, String> {
    v.parse::<u64>().map(Duration::from_secs).map_err(|_| "not a whole number of seconds (e.g. 30)".to_string())
}

impl Environment {
    /// The snapshot of `vars` (`std::env::vars_os()` in `cli::main`), and the knobs among them whose value cannot
    /// be used (each then unset).
    pub(crate) fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> (Environment, Vec<BadVar>) {
        let mut env = Environment { vars: vars.into_iter().collect(), knobs: Knobs::default() };
        let mut bad = Vec::new();
        env.knobs = env.parse_knobs(&mut bad);
        (env, bad)
    }

    /// A snapshot of `pairs` alone, for tests; a bad value panics.
    #[cfg(test)]
    pub(crate) fn of(pairs: &[(&str, &str)]) -> Environment {
        let (env, bad) = Environment::from_vars(pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        assert!(bad.is_empty(), "{bad:?}");
        env
    }

    /// A snapshot of this very process, for tests that run real programs (found on its `PATH`).
    #[cfg(test)]
    pub(crate) fn of_this_process() -> Environment {
        Environment::from_vars(std::env::vars_os()).0
    }

    /// A text knob: UTF-8, surrounding blanks dropped, nothing left is unset; what `parse` refuses is a [`BadVar`].
    fn knob<T>(&self, var: Var, bad: &mut Vec<BadVar>, parse: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let raw = self.raw(var)?;
        let Some(text) = raw.to_str() else {
            bad.push(BadVar::new(var, raw, "not UTF-8"));
            return None;
        };
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        parse(text).map_err(|why| bad.push(BadVar::new(var, raw, why))).ok()
    }

    fn parse_knobs(&self, bad: &mut Vec<BadVar>) -> Knobs {
        let text = |v: &str| Ok(v.to_string());
        let whole = |why: &'static str| move |v: &str| v.parse::<u64>().map_err(|_| why.to_string());
        let id = |v: &str| crate::model::validate_id(v).map(|()| v.to_string());
        let trust = |v: &str| -> Result<Vec<String>, String> {
            let digest = |d: &str| d.len() == 64 && d.chars().all(|c| c.is_ascii_hexdigit());
            let all: Vec<String> =
                v.split(',').map(|d| d.trim().to_ascii_lowercase()).filter(|d| !d.is_empty()).collect();
            // `any` is `trust::ANY` (not named here: `trust` reads this module, and imports go one way).
            match all.iter().find(|d| *d != "any" && !digest(d)) {
                Some(d) => Err(format!(
                    "'{d}' is neither a digest (64 hex digits, as `git swarm trust --digest` prints it) nor any"
                )),
                None => Ok(all),
            }
        };
        // A path: any bytes; empty is unset.
        let path = |var: Var| self.raw(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        Knobs {
            remote: self.knob(Var::Remote, bad, |v| {
                if v.starts_with('-') { Err("not a remote name, URL or path".into()) } else { text(v) }
            }),
            swarm: self.knob(Var::Swarm, bad, |v| crate::model::validate_swarm_name(v).map(|()| v.to_string())),
            // Not UTF-8, or empty: unset, not an error (docs/architecture.md: a hook must not stop on it).
            agent: self.raw(Var::Agent).and_then(OsStr::to_str).filter(|a| !a.is_empty()).map(str::to_string),
            parent: self.knob(Var::Parent, bad, id),
            transport: self.knob(Var::Transport, bad, str::parse),
            clock_offset: self.knob(Var::ClockOffset, bad, |v| {
                v.parse::<i64>().map_err(|_| "not a whole number of seconds (e.g. 120, or -30)".into())
            }),
            max_retry: self.knob(Var::MaxRetrySecs, bad, seconds),
            trust: self.knob(Var::Trust, bad, trust).unwrap_or_default(),
            profile: path(Var::Profile),
            bwrap: path(Var::Bwrap),
            http_retry_base_ms: self.knob(
                Var::HttpRetryBaseMs,
                bad,
                whole("not a whole number of milliseconds (e.g. 1000)"),
            ),
            hook_timeout: self.knob(Var::HookTimeout, bad, seconds),
            hook_renew: self.knob(Var::HookRenewSecs, bad, seconds),
            task_id: self.knob(Var::TaskId, bad, id),
            epoch: self.knob(Var::Epoch, bad, whole("not a whole number (a claim's epoch)")),
            handoff_file: path(Var::HandoffFile),
            outbox: path(Var::Outbox),
        }
    }

    /// The value of `var`, as `std::env::var_os` gives it (the first, should the environment hold it twice).
    fn raw(&self, var: Var) -> Option<&OsStr> {
        self.get(var.name())
    }

    /// Any variable by its name, as `std::env::var_os` gives it: for what names variables itself (the credential
    /// folders of tools a sandbox hides: `CARGO_HOME`, `DOCKER_CONFIG`, …).
    pub(crate) fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_os_str())
    }

    /// A variable the settings name (an `http` agent's `apiKeyEnv`, a forge's `token_env`), when it is UTF-8 and
    /// not blank.
    pub(crate) fn text(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(OsStr::to_str).filter(|v| !v.trim().is_empty())
    }

    /// `var`'s value when it is UTF-8 (may be empty), as `std::env::var(…).ok()`.
    fn utf8(&self, var: Var) -> Option<&str> {
        self.raw(var).and_then(OsStr::to_str)
    }

    /// Every variable, for what hands an environment on (the allow-list of a contained agent).
    pub(crate) fn vars_os(&self) -> impl Iterator<Item = (OsString, OsString)> + '_ {
        self.vars.iter().cloned()
    }

    /// Every variable whose name and value are UTF-8: what the engine takes (`Process::from_vars`: its knobs, the
    /// secrets scrubber) and the known-secrets scan of a landing.
    pub(crate) fn utf8_vars(&self) -> Vec<(String, String)> {
        self.vars.iter().filter_map(|(k, v)| Some((k.to_str()?.to_string(), v.to_str()?.to_string()))).collect()
    }

    /// `$GIT_SWARM_REMOTE`.
    pub(crate) fn remote(&self) -> Option<&str> {
        self.knobs.remote.as_deref()
    }

    /// `$GIT_SWARM_SWARM`.
    pub(crate) fn swarm(&self) -> Option<&str> {
        self.knobs.swarm.as_deref()
    }

    /// `$GIT_SWARM_AGENT` (not yet checked as an id: `Ctx::new` checks it with `--agent`'s rule).
    pub(crate) fn agent(&self) -> Option<&str> {
        self.knobs.agent.as_deref()
    }

    /// `$GIT_SWARM_PARENT`.
    pub(crate) fn parent(&self) -> Option<&str> {
        self.knobs.parent.as_deref()
    }

    /// `$GIT_SWARM_TRANSPORT`.
    pub(crate) fn transport(&self) -> Option<crate::Transport> {
        self.knobs.transport
    }

    /// `$GIT_SWARM_CLOCK_OFFSET`, in seconds (0 unset).
    pub(crate) fn clock_offset(&self) -> i64 {
        self.knobs.clock_offset.unwrap_or(0)
    }

    /// `$GIT_SWARM_MAX_RETRY_SECS` (unset: the retry loop's own limit).
    pub(crate) fn max_retry(&self) -> Option<Duration> {
        self.knobs.max_retry
    }

    /// The digests of `$GIT_SWARM_TRUST`, lower case (`any` among them, maybe).
    pub(crate) fn trust(&self) -> &[String] {
        &self.knobs.trust
    }

    /// `$GIT_SWARM_PROFILE`.
    pub(crate) fn profile(&self) -> Option<&Path> {
        self.knobs.profile.as_deref()
    }

    /// `$GIT_SWARM_BWRAP`.
    pub(crate) fn bwrap(&self) -> Option<&Path> {
        self.knobs.bwrap.as_deref()
    }

    /// `$GIT_SWARM_HTTP_RETRY_BASE_MS` (1000 unset).
    pub(crate) fn http_retry_base_ms(&self) -> u64 {
        self.knobs.http_retry_base_ms.unwrap_or(1000)
    }

    /// `$GIT_SWARM_HOOK_TIMEOUT` (10 s unset).
    pub(crate) fn hook_timeout(&self) -> Duration {
        self.knobs.hook_timeout.unwrap_or(Duration::from_secs(10))
    }

    /// `$GIT_SWARM_HOOK_RENEW_SECS` (60 s unset).
    pub(crate) fn hook_renew(&self) -> Duration {
        self.knobs.hook_renew.unwrap_or(Duration::from_secs(60))
    }

    /// `$GIT_SWARM_TASK_ID`.
    pub(crate) fn task_id(&self) -> Option<&str> {
        self.knobs.task_id.as_deref()
    }

    /// `$GIT_SWARM_EPOCH`.
    pub(crate) fn epoch(&self) -> Option<u64> {
        self.knobs.epoch
    }

    /// `$GIT_SWARM_HANDOFF_FILE`.
    pub(crate) fn handoff_file(&self) -> Option<&Path> {
        self.knobs.handoff_file.as_deref()
    }

    /// `$GIT_SWARM_OUTBOX`: set inside a runner's agent run.
    pub(crate) fn outbox(&self) -> Option<&Path> {
        self.knobs.outbox.as_deref()
    }

    /// An absolute path from `var`, else none.
    fn folder(&self, var: Var) -> Option<&Path> {
        self.raw(var).map(Path::new).filter(|p| p.is_absolute())
    }

    /// `$HOME`, when it is an absolute path.
    pub(crate) fn home(&self) -> Option<&Path> {
        self.folder(Var::Home)
    }

    /// `$XDG_CACHE_HOME`, else `~/.cache`.
    pub(crate) fn cache_home(&self) -> Option<PathBuf> {
        self.folder(Var::XdgCacheHome).map(Path::to_path_buf).or_else(|| self.home().map(|h| h.join(".cache")))
    }

    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    pub(crate) fn config_home(&self) -> Option<PathBuf> {
        self.folder(Var::XdgConfigHome).map(Path::to_path_buf).or_else(|| self.home().map(|h| h.join(".config")))
    }

    /// `$XDG_DATA_HOME`, else `~/.local/share`.
    pub(crate) fn data_home(&self) -> Option<PathBuf> {
        self.folder(Var::XdgDataHome).map(Path::to_path_buf).or_else(|| self.home().map(|h| h.join(".local/share")))
    }

    /// `$BASH_COMPLETION_USER_DIR`.
    pub(crate) fn bash_completion_user_dir(&self) -> Option<&Path> {
        self.folder(Var::BashCompletionUserDir)
    }

    /// `$PATH`.
    pub(crate) fn path(&self) -> Option<&OsStr> {
        self.raw(Var::Path)
    }

    /// Has this machine declared itself a disposable sandbox (`IS_SANDBOX=1`)?
    pub(crate) fn sandbox_declared(&self) -> bool {
        self.utf8(Var::IsSandbox) == Some("1")
    }

    /// The user of the default agent id: `$USER`, else `$USERNAME` (as given: the id is cleaned of what it may not
    /// hold).
    pub(crate) fn user(&self) -> Option<&str> {
        self.utf8(Var::User).or_else(|| self.utf8(Var::Username))
    }

    /// The host of the default agent id, when the kernel does not say it: `$HOSTNAME`, else `$COMPUTERNAME`.
    pub(crate) fn host(&self) -> Option<&str> {
        self.utf8(Var::Hostname).or_else(|| self.utf8(Var::Computername))
    }

    /// `$GIT_CONFIG_PARAMETERS`, as git wrote it (`config::git_config_parameters` reads it).
    pub(crate) fn git_config_parameters(&self) -> Option<&str> {
        self.utf8(Var::GitConfigParameters)
    }

    /// One of git's identity variables (`GIT_AUTHOR_NAME`, …), when set and not empty.
    pub(crate) fn git_identity(&self, var: Var) -> Option<&str> {
        debug_assert!(matches!(
            var,
            Var::GitAuthorName | Var::GitAuthorEmail | Var::GitCommitterName | Var::GitCommitterEmail
        ));
        self.utf8(var).filter(|v| !v.is_empty())
    }

    /// Is one of git's identity variables set (not empty, UTF-8 or not)?
    pub(crate) fn git_identity_set(&self, var: Var) -> bool {
        self.raw(var).is_some_and(|v| !v.is_empty())
    }

    /// `$GITHUB_API_URL`, when not blank.
    pub(crate) fn github_api_url(&self) -> Option<&str> {
        self.text(Var::GithubApiUrl.name())
    }

    /// `$GITLAB_API_URL`, when not blank.
    pub(crate) fn gitlab_api_url(&self) -> Option<&str> {
        self.text(Var::GitlabApiUrl.name())
    }

    /// GitHub's token: `$GITHUB_TOKEN`, else `$GH_TOKEN` (not blank).
    pub(crate) fn github_token(&self) -> Option<&str> {
        self.text(Var::GithubToken.name()).or_else(|| self.text(Var::GhToken.name()))
    }

    /// GitLab's token: `$GITLAB_TOKEN` (not blank).
    pub(crate) fn gitlab_token(&self) -> Option<&str> {
        self.text(Var::GitlabToken.name())
    }
}

/// The docs' table of the variables, from their declaration (what the test below checks `docs/configuration.md`
/// against, and prints to paste).
#[cfg(test)]
fn docs_table() -> String {
    let mut out = String::from("| variable | what it sets | its value |\n| --- | --- | --- |\n");
    for v in Var::ALL {
        out.push_str(&format!("| `{}` | {} | {} |\n", v.name(), v.meaning(), v.rule()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(pairs: &[(&str, &str)]) -> Vec<BadVar> {
        Environment::from_vars(pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v)))).1
    }

    #[test]
    fn every_knob_reads_as_it_did_when_it_is_good() {
        let env = Environment::of(&[
            ("GIT_SWARM_REMOTE", "origin"),
            ("GIT_SWARM_SWARM", "team"),
            ("GIT_SWARM_AGENT", "w-1"),
            ("GIT_SWARM_PARENT", "t-1a2b3c"),
            ("GIT_SWARM_TRANSPORT", "git-fetch"),
            ("GIT_SWARM_CLOCK_OFFSET", "-8"),
            ("GIT_SWARM_MAX_RETRY_SECS", "20"),
            ("GIT_SWARM_TRUST", &format!("any, {}", "AB".repeat(32))),
            ("GIT_SWARM_PROFILE", "/tmp/p.jsonl"),
            ("GIT_SWARM_HTTP_RETRY_BASE_MS", "10"),
            ("GIT_SWARM_HOOK_TIMEOUT", "2"),
            ("GIT_SWARM_HOOK_RENEW_SECS", "0"),
            ("GIT_SWARM_TASK_ID", "t-77aa01"),
            ("GIT_SWARM_EPOCH", "3"),
            ("HOME", "/home/me"),
            ("XDG_CONFIG_HOME", "relative/is/ignored"),
            ("IS_SANDBOX", "1"),
            ("USERNAME", "me"),
            ("GH_TOKEN", "ghs_x"),
            ("GITHUB_TOKEN", "  "),
        ]);
        assert_eq!(
            (env.remote(), env.swarm(), env.agent(), env.parent()),
            (Some("origin"), Some("team"), Some("w-1"), Some("t-1a2b3c"))
        );
        assert_eq!(env.transport(), Some(crate::Transport::GitFetch));
        assert_eq!((env.clock_offset(), env.max_retry()), (-8, Some(Duration::from_secs(20))));
        assert_eq!(env.trust(), ["any".to_string(), "ab".repeat(32)]);
        assert_eq!(env.profile(), Some(Path::new("/tmp/p.jsonl")));
        assert_eq!(env.http_retry_base_ms(), 10);
        assert_eq!((env.hook_timeout(), env.hook_renew()), (Duration::from_secs(2), Duration::ZERO));
        assert_eq!((env.task_id(), env.epoch()), (Some("t-77aa01"), Some(3)));
        assert_eq!(env.cache_home(), Some(PathBuf::from("/home/me/.cache")));
        assert_eq!(env.config_home(), Some(PathBuf::from("/home/me/.config")), "XDG: a relative path is none");
        assert!(env.sandbox_declared());
        assert_eq!(env.user(), Some("me"));
        assert_eq!(env.github_token(), Some("ghs_x"), "a blank GITHUB_TOKEN is none");
    }

    #[test]
    fn unset_or_empty_knobs_are_their_defaults() {
        let env = Environment::of(&[("GIT_SWARM_CLOCK_OFFSET", ""), ("GIT_SWARM_HOOK_TIMEOUT", "  "), ("HOME", "rel")]);
        assert_eq!(env.clock_offset(), 0);
        assert_eq!(env.hook_timeout(), Duration::from_secs(10));
        assert_eq!(env.hook_renew(), Duration::from_secs(60));
        assert_eq!(env.http_retry_base_ms(), 1000);
        assert_eq!((env.max_retry(), env.transport(), env.task_id()), (None, None, None));
        assert_eq!((env.home(), env.cache_home()), (None, None), "a relative HOME is none");
        assert!(!env.sandbox_declared());
    }

    /// A knob that holds what cannot be used is an error naming it and what it must be: never a silent default.
    #[test]
    fn a_bad_knob_is_named_with_what_it_must_be() {
        for (name, value, says) in [
            ("GIT_SWARM_REMOTE", "--upload-pack=x", "not a remote name"),
            ("GIT_SWARM_SWARM", "a b", "swarm name"),
            ("GIT_SWARM_PARENT", "x; y", "id"),
            ("GIT_SWARM_TRANSPORT", "ssh", "auto, git or git-fetch"),
            ("GIT_SWARM_CLOCK_OFFSET", "soon", "whole number of seconds"),
            ("GIT_SWARM_MAX_RETRY_SECS", "-1", "whole number of seconds"),
            ("GIT_SWARM_TRUST", "abc123", "64 hex digits"),
            ("GIT_SWARM_HTTP_RETRY_BASE_MS", "1s", "milliseconds"),
            ("GIT_SWARM_HOOK_TIMEOUT", "ten", "whole number of seconds"),
            ("GIT_SWARM_HOOK_RENEW_SECS", "1.5", "whole number of seconds"),
            ("GIT_SWARM_TASK_ID", "x; touch pwned", "id"),
            ("GIT_SWARM_EPOCH", "two", "whole number"),
        ] {
            let got = bad(&[(name, value)]);
            assert_eq!(got.len(), 1, "{name}={value}: {got:?}");
            let shown = got[0].to_string();
            assert!(shown.starts_with(&format!("{name}={value}: ")) && shown.contains(says), "{shown}");
        }
        // Not UTF-8: named too (clap refused it before, as "invalid UTF-8", for the remote and the swarm).
        use std::os::unix::ffi::OsStrExt;
        let (_, got) = Environment::from_vars([("GIT_SWARM_REMOTE".into(), OsStr::from_bytes(b"o\xff").into())]);
        assert!(got.len() == 1 && got[0].why == "not UTF-8", "{got:?}");
        // `GIT_SWARM_AGENT` is the exception: not UTF-8 or empty, it is unset.
        let (env, got) = Environment::from_vars([("GIT_SWARM_AGENT".into(), OsStr::from_bytes(b"\xff").into())]);
        assert!(got.is_empty() && env.agent().is_none());
    }

    /// The engine's knobs are in the table, and their rule is the engine's.
    #[test]
    fn the_engine_s_knobs_are_the_engine_s() {
        let vars = |k: Var, v: &str| vec![(k.name().to_string(), v.to_string())];
        assert!(git_swarm_core::Process::from_vars(&vars(Var::GitTimeout, "0")).is_err());
        assert!(git_swarm_core::Process::from_vars(&vars(Var::GitTimeout, "2.5")).is_ok());
        assert!(git_swarm_core::Process::from_vars(&vars(Var::GitConfigCount, "x")).is_err());
    }

    /// A default the table shows is the default the code uses.
    #[test]
    fn the_defaults_shown_are_the_defaults() {
        let none = Environment::default();
        let engine = git_swarm_core::Process::default();
        let retry = crate::Retry::default();
        for (var, default) in [
            (Var::ClockOffset, none.clock_offset().to_string()),
            (Var::MaxRetrySecs, retry.max_elapsed.as_secs().to_string()),
            (Var::GitTimeout, engine.git_timeout.as_secs().to_string()),
            (Var::HttpRetryBaseMs, none.http_retry_base_ms().to_string()),
            (Var::HookTimeout, none.hook_timeout().as_secs().to_string()),
            (Var::HookRenewSecs, none.hook_renew().as_secs().to_string()),
            (Var::GithubApiUrl, format!("`{}`", crate::github::api::DEFAULT_API_URL)),
            (Var::GitlabApiUrl, format!("`{}`", crate::gitlab::DEFAULT_API_URL)),
        ] {
            let rule = var.rule();
            assert!(rule.contains("unset: ") && rule.ends_with(&format!(" {default}")), "{}: {rule}", var.name());
        }
    }

    #[test]
    fn the_first_of_two_is_the_value_as_getenv_says() {
        let env = Environment::of(&[("HOME", "/a"), ("HOME", "/b")]);
        assert_eq!(env.home(), Some(Path::new("/a")));
        assert_eq!(env.vars_os().count(), 2, "handed on as it came");
    }

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    const BEGIN: &str =
        "<!-- generated from src/environment.rs: edit there, and paste what environment::docs_table says -->";
    const END: &str = "<!-- end of the generated environment table -->";

    /// The table of `docs/configuration.md` is the declaration's: a variable added, dropped or changed there fails
    /// this test, which prints the table to paste.
    #[test]
    fn the_docs_table_of_the_environment_is_its_declaration() {
        let doc = std::fs::read_to_string(DOC).expect("docs");
        let table = doc
            .split_once(BEGIN)
            .and_then(|(_, rest)| rest.split_once(END))
            .map(|(table, _)| table.trim_start_matches('\n'))
            .unwrap_or_else(|| panic!("docs/configuration.md has no lines {BEGIN} … {END}"));
        let want = docs_table();
        assert!(table == want, "docs/configuration.md's table of the environment is not the declaration's:\n{want}");
        for v in Var::ALL {
            assert!(!v.meaning().contains('|') && !v.rule().contains('|'), "{}", v.name());
            assert!(!v.meaning().is_empty(), "{} says nothing", v.name());
        }
        let names: std::collections::HashSet<&str> = Var::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(names.len(), Var::ALL.len(), "a name declared twice");
    }
}

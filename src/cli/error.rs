//! The one error type of the command line: a kind (→ exit code), a message, and hints.

use crate::RemoteError;
use crate::TxnError;
use crate::ops::DomainError;

/// Exit codes of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 1: I/O, git, network, a state ref that cannot be read.
    Error = 1,
    /// 2: unknown command or flag, bad value.
    Usage = 2,
    /// 3: `claim` without an id found no ready task.
    NothingReady = 3,
    /// 4: refused by the swarm's state.
    Refused = 4,
}

#[derive(Debug)]
pub(crate) struct CliError {
    pub exit: Exit,
    pub message: String,
    pub hints: Vec<String>,
    /// The command printed its JSON document already: `--json` must not get a second one.
    pub documented: bool,
}

pub(crate) type CliResult<T> = Result<T, CliError>;

impl CliError {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        CliError { exit, message: message.into(), hints: vec![], documented: false }
    }
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }
    pub(crate) fn io(message: impl Into<String>) -> Self {
        Self::new(Exit::Error, message)
    }
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }
    /// Mark the error as coming after the command's JSON document.
    pub(crate) fn documented(mut self) -> Self {
        self.documented = true;
        self
    }
    pub(crate) fn code(&self) -> u8 {
        self.exit as u8
    }

    /// The JSON document of this error on stdout, alone (the message went to stderr already).
    pub(crate) fn report_json_only(&self) {
        use std::io::Write;
        let doc = serde_json::json!({"error": {"code": self.code(), "message": self.message, "hints": self.hints}});
        let _ = writeln!(std::io::stdout().lock(), "{doc}");
    }

    /// `error: …` and `hint: …` lines on stderr; with `--json` also a JSON object on stdout so that scripts always
    /// get one document.
    pub(crate) fn report(&self, json: bool) {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "error: {}", self.message);
        for h in &self.hints {
            let _ = writeln!(err, "hint: {h}");
        }
        if json && !self.documented {
            self.report_json_only();
        }
    }
}

impl From<DomainError> for CliError {
    fn from(e: DomainError) -> Self {
        let msg = e.to_string();
        match &e {
            DomainError::NothingReady { .. } => {
                CliError::new(Exit::NothingReady, msg).hint("see what waits on what with `git swarm list`")
            }
            DomainError::UnknownTask(_) => {
                CliError::new(Exit::Refused, msg).hint("see the board with `git swarm list`")
            }
            DomainError::ClaimedByOther { .. } => {
                CliError::new(Exit::Refused, msg).hint("take the best ready task instead with `git swarm claim`")
            }
            DomainError::NotClaimed { id, ever: false, .. } => CliError::new(Exit::Refused, msg)
                .hint(format!("claim it first: `git swarm claim {id}` (then work on it, then `git swarm done {id}`)")),
            DomainError::NotMine { .. } | DomainError::StaleEpoch { .. } | DomainError::NotClaimed { .. } => {
                CliError::new(Exit::Refused, msg).hint(
                    "your claim has ended (another agent took the task over, or it was released); claim another task",
                )
            }
            DomainError::Stopped { .. } => CliError::new(Exit::Refused, msg).hint(
                "`git swarm status` shows the judge's reasons; `git swarm goal \"<next goal>\"` starts the next cycle",
            ),
            DomainError::DepsNotDone { .. } => {
                CliError::new(Exit::Refused, msg).hint("`git swarm ready` lists the tasks that can be claimed now")
            }
            DomainError::AttemptsExhausted { .. } | DomainError::Final { .. } | DomainError::EpochExhausted { .. } => {
                CliError::new(Exit::Refused, msg)
            }
            DomainError::IdSpaceExhausted(_) | DomainError::PartialBoard(_) => CliError::new(Exit::Error, msg),
            DomainError::Invalid { .. } => CliError::new(Exit::Usage, msg),
            DomainError::NotRetryable { .. } => {
                CliError::new(Exit::Refused, msg).hint("`git swarm list --status failed` lists the tasks to retry")
            }
            DomainError::DependencyCycle { .. } => CliError::new(Exit::Refused, msg).hint(
                "`git swarm doctor` shows the cycle (made by hand on the state ref); a planner cancels the tasks on it",
            ),
            DomainError::NotOnBoard { .. } => {
                CliError::new(Exit::Refused, msg).hint("`git swarm list` shows the tasks a file can name by id")
            }
            DomainError::BadSetting(_) => {
                CliError::new(Exit::Usage, msg).hint("the settings: docs/agents.md (swarm.toml), `git swarm config`")
            }
        }
    }
}

impl From<crate::StoreError> for CliError {
    fn from(e: crate::StoreError) -> Self {
        TxnError::from(e).into()
    }
}

impl From<TxnError> for CliError {
    fn from(e: TxnError) -> Self {
        let msg = e.to_string();
        match e {
            TxnError::Domain(d) => d.into(),
            TxnError::NotInitialized { .. } => {
                CliError::io(msg).hint("create it with `git swarm init`, or name another remote with --remote")
            }
            TxnError::Stuck { .. } => {
                CliError::io(msg).hint("a lock file left by a killed git process, or a server that refuses the update")
            }
            TxnError::OutcomeUnknown { .. } => {
                CliError::io(msg).hint("look at `git swarm log` (or `git swarm show <id>`) before you run the op again")
            }
            TxnError::Contention { .. } => {
                CliError::io(msg).hint("many agents are writing at once; try again, or raise GIT_SWARM_MAX_RETRY_SECS")
            }
            TxnError::Remote(RemoteError::Unreachable { remote, message }) => {
                CliError::io(msg).hint(unreachable_hint(&remote, &message))
            }
            TxnError::BrokenSettings { fallback, .. } => {
                let repair = match fallback {
                    Some(good) => format!(
                        "`git swarm doctor --fix` puts back the settings of commit {} (the newest that read)",
                        crate::short(&good)
                    ),
                    None => "`git swarm init --config <file> --force` writes new settings".to_string(),
                };
                CliError::io(msg)
                    .hint(repair)
                    .hint("or `git swarm config set <key> <value>` (from those settings), `git swarm init --config <file> --force`")
            }
            TxnError::Lineage { .. } => CliError::io(msg)
                .hint("`git swarm doctor` shows what changed; `git swarm doctor --fix` puts back what this clone saw")
                .hint("to take the remote's state as it is: `git swarm doctor --accept-remote`"),
            TxnError::TargetRewound { remote, loss } => {
                CliError::io(msg).hint(loss.hint(&remote)).hint("`git swarm doctor` names the tasks whose code is gone")
            }
            TxnError::Remote(RemoteError::Refused { reason, .. })
                if crate::is_storage_refusal(reason.as_str()) =>
            {
                CliError::io(msg)
                    .hint("the remote could not store what was pushed (a full disk?); nothing was changed there")
            }
            TxnError::Remote(RemoteError::PushDenied { remote, .. }) => CliError::io(msg)
                .hint(format!(
                    "the runners' credentials must be allowed to push to {remote} (a token or deploy key with write \
                     access; `git daemon --enable=receive-pack`; `http.receivepack` for git http-backend)"
                ))
                .hint(format!("fetches may work meanwhile: `git ls-remote {remote}` reads, `git push --dry-run {remote} HEAD` tries a push")),
            TxnError::Remote(RemoteError::Refused { refname, .. }) => {
                let what = if refname.contains("refs/heads/") { refname.as_str() } else { "refs/swarm/*" };
                CliError::io(msg)
                    .hint(format!("the remote's hooks or protection rules must let the swarm's runners push {what}"))
            }
            _ => CliError::io(msg),
        }
    }
}

/// What a person should look at when `remote` could not be reached, from what git or the transport said: the
/// server is down (a refused connection, a timeout), its name does not resolve, the credentials were refused, or
/// there is no repository at the URL.
fn unreachable_hint(remote: &str, message: &str) -> String {
    let m = message.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| m.contains(w));
    let check = format!("`git ls-remote {remote}`");
    if has(&["connection refused", "timed out", "connection reset", "no route to host", "network is unreachable"]) {
        format!("the server did not answer (is it up? a runner rides out an outage of a third of its lease): {check}")
    } else if has(&["could not resolve", "name or service not known", "temporary failure in name resolution"]) {
        format!("the server's name does not resolve (DNS, or a typo in the URL): {check}")
    } else if has(&[
        "permission denied",
        "authentication failed",
        "could not read username",
        "401",
        "403",
        "access denied",
        "host key verification failed",
    ]) {
        format!("the server refused the credentials (a token, an ssh key, its rights on this repository): {check}")
    } else if has(&["does not appear to be a git repository", "not found", "no such file or directory"]) {
        format!("there is no repository at that URL: check `git remote -v` and {check}")
    } else {
        format!("check the remote's URL and your access with {check}")
    }
}

#[cfg(test)]
mod tests {
    use super::unreachable_hint;

    #[test]
    fn an_unreachable_remote_is_named_by_what_happened() {
        let cases = [
            ("fatal: unable to connect to 127.0.0.1:9418: Connection refused", "did not answer"),
            ("ssh: Could not resolve hostname gitlab.example: Name or service not known", "does not resolve"),
            ("git@host: Permission denied (publickey).", "refused the credentials"),
            ("remote: HTTP Basic: Access denied; fatal: Authentication failed for 'https://h/r.git/'", "credentials"),
            ("fatal: '/srv/gone.git' does not appear to be a git repository", "no repository at that URL"),
            ("something else", "check the remote's URL"),
        ];
        for (message, said) in cases {
            let hint = unreachable_hint("origin", message);
            assert!(hint.contains(said) && hint.contains("git ls-remote origin"), "{message}: {hint}");
        }
    }
}
